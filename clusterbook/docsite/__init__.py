"""The docs site: Markdown sections generated from the cluster file, and the MkDocs adapters that place them."""
