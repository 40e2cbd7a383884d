"""Programs that run on the nodes, as real files in their own language (Python 3.6 for EL 8's /usr/bin/python3;
importable and unit-tested here with fakes); the renderer adds only the generated-file header, and their
configuration comes in a file of its own (pure/render/artifacts.py: node_program)."""
