"""`python -m bertology.localcluster build|up|down|status` (make cluster-build, cluster, cluster-down)."""

from __future__ import annotations

import argparse
import sys
import time

from bertology.errors import EXIT_BAD_INPUT, BadInput
from bertology.localcluster import build, control, processes
from bertology.localcluster import layout as lay


def _usage_for_users(kubeconfig) -> str:
    return (f"\nA real Kubernetes {build.MODULES['kubernetes'].version()} with Argo Workflows "
            f"{build.MODULES['argo'].version()} is running on this machine. Use it with\n"
            f"  export KUBECONFIG={kubeconfig} PATH=$PWD/.venv/bin:$PATH\n"
            f"  kubectl get nodes; argo list -A\n"
            f"Stop it, leaving nothing behind: make cluster-down")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.localcluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build the binaries (once per version) and print where they are")
    start = commands.add_parser("up", help="start the cluster (what runs already is kept)")
    start.add_argument("--gpus", type=int, default=2, help="nvidia.com/gpu the node advertises (CPU-backed)")
    start.add_argument("--no-bertology-images", action="store_true",
                       help="import only the cluster's own images, not bertology's (make images BASE=local)")
    stop = commands.add_parser("down", help="stop everything and leave nothing behind")
    stop.add_argument("--drop-images", action="store_true", help="also delete containerd's image store")
    commands.add_parser("status", help="each component's pid, or that it is not running")
    args = parser.parse_args(argv)
    layout = lay.Layout.default()
    try:
        if args.command == "build":
            started = time.monotonic()
            for name, path in build.build_all().items():
                print(f"{name}: {path}")
            print(f"({time.monotonic() - started:.0f} s)")
        elif args.command == "up":
            if args.gpus < 0:
                raise BadInput(f"--gpus {args.gpus}: a count of 0 or more")
            kubeconfig = control.up(layout=layout, gpus=args.gpus, bertology_images=not args.no_bertology_images)
            print(_usage_for_users(kubeconfig))
        elif args.command == "down":
            left = control.down(layout=layout, keep_images=not args.drop_images)
            if left:
                print(f"cluster-down: {len(left)} things left behind (listed above)", file=sys.stderr)
                return 1
            print("cluster down: no process, mount, cgroup, iptables rule or container left")
        else:
            for name, pid in control.status(layout).items():
                print(f"{name}: {'running, pid ' + str(pid) if pid else 'not running'}")
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except processes.StartFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
