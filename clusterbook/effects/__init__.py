"""Effects: everything that touches the file system, processes, the network or other machines."""
