"""The container image (deploy/Containerfile) built and run under podman: one node, and a cluster
of three whose nodes find each other through the container network's DNS."""
