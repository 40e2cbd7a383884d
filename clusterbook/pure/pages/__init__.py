"""The docs site's generated sections, a module per group of pages."""
