"""The lab: a real multi-node llama.cpp cluster on one Linux machine (systemd-nspawn, sshd, real llama.cpp)."""
