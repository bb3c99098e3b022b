"""A real single-node Kubernetes cluster with Argo Workflows on this machine, built from Go modules.

`make cluster` (python -m bertology.localcluster up) builds the pinned binaries once (build.py), prepares
the host (host.py), makes the certificates (pki.py), starts etcd, the control plane, containerd, the
kubelet and kube-proxy as plain processes (processes.py, control.py), imports the images into containerd
and installs Argo (argo.py). `make cluster-down` stops it all and leaves nothing behind.
"""
