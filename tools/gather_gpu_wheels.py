"""Gather the packages the GPU truth kit needs on a bare GPU machine, slimmed to a small upload.

The GPU machine (one H200, no network) has Python 3.12 with torch 2.11 (CUDA 13.0), transformers,
peft, accelerate and triton, but not TRL, datasets, Unsloth or bitsandbytes. This script downloads
their wheels for Python 3.12 / manylinux x86-64 from PyPI, unpacks them into a git-ignored folder
that the kit puts on ``sys.path`` (what ``pip install --no-deps --target`` would leave, without pip),
and drops what the trainer never loads: Unsloth's ``studio/`` web app and every bitsandbytes CUDA
library but the one matching the machine's CUDA 13.0. Then it checks:

- the files the kit needs are still there (the CUDA 13.0 library, each package's ``__init__``);
- every requirement of the carried packages is carried, present on the machine's image, or known
  to be optional (xformers, diffusers, vLLM, ...);
- the carried folder plus the project's own files stay under 60 MiB (the upload the kit was sized for: 64).

and prints the exact command to run the kit and the folder to carry.

    python tools/gather_gpu_wheels.py             # download once (~80 MB), unpack, check, print
    python tools/gather_gpu_wheels.py --check     # no download: check an existing folder

Wheels already downloaded are reused; only missing ones are fetched.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Git-ignored: ``download/`` keeps the wheels as published, ``carry/`` the slimmed wheels that travel
#: to the GPU machine, ``site/`` them unpacked here for the checks.
WHEEL_DIR = ROOT / ".gpu_wheels"
DOWNLOADS = WHEEL_DIR / "download"
CARRY = WHEEL_DIR / "carry"
SITE = WHEEL_DIR / "site"
LIMIT_MIB = 60.0

#: The packages carried, at the versions the CPU test venv runs (2026-11-30). The first five are
#: what the kit imports; the rest are their needs that the machine's image lacks.
WHEELS = {
    "trl": "1.14.2",
    "datasets": "4.8.5",
    "unsloth": "2026.10.9",
    "unsloth_zoo": "2026.10.9",
    "bitsandbytes": "0.50.2",
    "torchao": "0.18.0",
    "cut_cross_entropy": "25.1.1",
    "tyro": "1.0.17",
    "docstring_parser": "0.18.0",
    "typeguard": "4.6.1",
    "msgspec": "0.23.0",
    "dill": "0.4.1",
    "multiprocess": "0.70.19",
    "structlog": "26.1.0",
    "json5": "0.17.3",
    "nest_asyncio": "1.6.0",
    "hf_transfer": "0.1.9",
    # the image has both, at versions not recorded: unsloth asks for certifi>=2026.10.19, this project for
    # packaging>=26.3 (SpecifierSet.is_unsatisfiable); carried so that the doctor's checks pass there as here
    "packaging": "26.4",
    "certifi": "2026.10.19.post1",
    # this project's own: the real built-in model is converted from a GGUF file (pure Python, ~100 kB)
    "gguf": "0.19.0",
    # this project's own: pydantic checks a recipe config's keys and types (the image has none of it);
    # typing_extensions is on the image at a version not recorded, and pydantic asks for >=4.14.1
    "pydantic": "2.14.4",
    "pydantic_core": "2.50.5",
    "annotated_types": "0.8.0",
    "typing_inspection": "0.4.5",
    "typing_extensions": "4.16.0",
}

#: The machine's Python packages (as the image's description lists them, read 2026-11-17), with the versions
#: known for some of them. A requirement met here is not carried.
IMAGE_VERSIONS = {
    "accelerate": "1.15.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2", "safetensors": "0.8.0",
    "sentencepiece": "0.2.2", "tokenizers": "0.23.2", "torch": "2.11.0", "torchvision": "0.26.0",
    "transformers": "5.17.0", "triton": "3.6.0",
}
IMAGE_PACKAGES = set(IMAGE_VERSIONS) | set("""
aiohttp anyio attrs certifi charset-normalizer click einops filelock fsspec h11 hf-xet httpcore httpx idna
jinja2 markupsafe matplotlib msgpack multidict numba packaging pandas peft pillow pip protobuf psutil pyarrow
pygments python-dateutil pytest pyyaml regex requests rich scipy setuptools six sympy tqdm typer
typing-extensions urllib3 wheel xxhash yarl zipp
""".split())

def not_carried() -> dict[str, str]:
    """Requirements declared but left behind, and why: what the doctor lets pass as not needed to
    train (its preflight runs on the GPU machine too), and vLLM.

    A function, not a module constant: the doctor imports the project's config, which needs pydantic,
    and on the GPU machine pydantic is one of the carried wheels, on the path only after `unpack`
    (the kit imports this module before it unpacks anything)."""
    sys.path.insert(0, str(ROOT))
    from unsloth_grpo.hardware.doctor.checks import NOT_NEEDED_TO_TRAIN

    out = {k: v for k, v in NOT_NEEDED_TO_TRAIN.items() if k not in WHEELS}
    out["vllm"] = "far too large to carry; the kit measures transformers generation instead"
    return out



# What is left out of a wheel while unpacking it, and why.
def _dropped(package: str, member: str) -> bool:
    if package == "unsloth":
        return member.startswith("studio/")  # the web app; `import unsloth` never reaches it
    if package == "torchao":
        return member.startswith("test/")  # its own tests, as a top-level `test` that shadows the stdlib's
    if ".data/scripts/" in member:
        return True  # console scripts (dill's); nothing here runs them
    if package == "bitsandbytes":
        name = member.rsplit("/", 1)[-1]
        # one CUDA library, the one for torch's CUDA 13.0; the CPU library stays as bitsandbytes' fallback
        return name.startswith("libbitsandbytes_") and name not in ("libbitsandbytes_cuda130.so",
                                                                    "libbitsandbytes_cpu.so")
    return False


#: Files the kit cannot run without, checked after slimming.
REQUIRED_FILES = [
    "bitsandbytes/libbitsandbytes_cuda130.so", "bitsandbytes/__init__.py", "unsloth/__init__.py",
    "unsloth_zoo/__init__.py", "trl/__init__.py", "datasets/__init__.py", "torchao/__init__.py",
]

#: Python 3.12 / x86-64 as the image's description spells it (pip matches each manylinux tag exactly).
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64",
             "manylinux1_x86_64"]
#: The machine, for evaluating requirement markers.
MARKER_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}

#: What the GPU machine runs once the folder is there (see docs/gpu_truth.md).
RUN_COMMAND = "PYTHONUNBUFFERED=1 python3 benchmarks/gpu_truth.py"


def _canon(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def _wheel_of(package: str) -> Path | None:
    stem = package.replace("-", "_").lower()
    found = [p for p in DOWNLOADS.glob("*.whl")
             if p.name.lower().startswith(f"{stem}-{WHEELS[package]}-")]
    return found[0] if found else None


def download(packages: list[str]) -> None:
    """``pip download`` the given pinned packages (no dependencies) for the GPU machine."""
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "--dest", str(DOWNLOADS)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    cmd += [f"{p}=={WHEELS[p]}" for p in packages]
    print("downloading: " + " ".join(f"{p}=={WHEELS[p]}" for p in packages), flush=True)
    subprocess.run(cmd, check=True)


def slim(wheel: Path, package: str, dest_dir: Path) -> dict:
    """Write ``wheel`` to ``dest_dir`` without the members :func:`_dropped` names (RECORD kept true).

    Returns the published size, the slimmed size and the uncompressed bytes left out.
    """
    dest = dest_dir / wheel.name
    dropped = 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as out:
        gone = {i.filename for i in src.infolist() if _dropped(package, i.filename)}
        for info in src.infolist():
            if info.filename in gone:
                dropped += info.file_size
                continue
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(ln for ln in lines if ln.split(",", 1)[0] not in gone).encode()
            out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    return {"wheel": wheel.stat().st_size, "carried": dest.stat().st_size, "dropped": dropped}


def unpack(wheel_dir: Path = CARRY, site: Path = SITE) -> list[str]:
    """Unpack every wheel of ``wheel_dir`` into ``site`` (made afresh): what ``pip install --no-deps
    --target`` leaves for these wheels, without pip. The kit calls this on the GPU machine."""
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    names = []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        names.append(wheel.name)
    return names


def requirement_problems(site: Path = SITE, installed: dict[str, str | None] | None = None) -> list[str]:
    """Requirements of the carried packages that are neither carried, installed, nor optional.

    ``installed`` maps canonical names to versions (None: version unknown); by default the GPU
    image's list above. The kit passes what this machine really has (:func:`installed_here`).
    """
    from email.parser import Parser

    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    where = "the GPU image" if installed is None else "this machine"
    if installed is None:
        installed = {_canon(p): IMAGE_VERSIONS.get(p) for p in IMAGE_PACKAGES}
    carried = {_canon(p) for p in WHEELS}
    optional = {_canon(p) for p in not_carried()}
    problems = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        msg = Parser().parsestr(meta.read_text(encoding="utf-8"))
        owner = msg["Name"]
        for line in msg.get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(MARKER_ENV):
                continue
            name = _canon(req.name)
            if name in optional or name in carried:
                continue
            if name not in installed:
                problems.append(f"{owner} needs {req} which is neither carried nor on {where}")
                continue
            have = installed[name]
            try:
                ok = have is None or not req.specifier or req.specifier.contains(Version(have), prereleases=True)
            except InvalidVersion:
                ok = True
            if not ok:
                problems.append(f"{owner} needs {req} but {where} has {req.name} {have}")
    return problems


def installed_here() -> dict[str, str | None]:
    """Every distribution this interpreter can import, canonical name -> version."""
    from importlib.metadata import distributions

    return {_canon(d.metadata["Name"]): d.version for d in distributions() if d.metadata["Name"]}


def missing_files(site: Path = SITE) -> list[str]:
    return [f for f in REQUIRED_FILES if not (site / f).is_file()]


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def project_bytes(root: Path = ROOT) -> int:
    """What is sent to the GPU machine besides the carried folder: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    return sum((root / f).stat().st_size for f in out.split("\0") if f and (root / f).is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="Download nothing; slim and check what is there.")
    args = ap.parse_args(argv)

    missing = [p for p in WHEELS if _wheel_of(p) is None]
    if missing and not args.check:
        download(missing)
        missing = [p for p in WHEELS if _wheel_of(p) is None]
    if missing:
        print(f"error: no wheel for {', '.join(missing)} in {DOWNLOADS}; run without --check", file=sys.stderr)
        return 1
    if CARRY.exists():
        shutil.rmtree(CARRY)
    CARRY.mkdir(parents=True)
    report = {p: slim(_wheel_of(p), p, CARRY) for p in WHEELS}
    unpack(CARRY, SITE)
    mib = 1024 ** 2
    print(f"{'package':28s} {'published MiB':>13s} {'carried MiB':>11s} {'left out MiB (unpacked)':>24s}")
    for package, r in report.items():
        print(f"{package + '==' + WHEELS[package]:28s} {r['wheel'] / mib:13.2f} {r['carried'] / mib:11.2f} "
              f"{r['dropped'] / mib:24.2f}")
    problems = [f"missing after slimming: {f}" for f in missing_files()] + requirement_problems()
    carry_mib, project_mib = folder_bytes(CARRY) / mib, project_bytes() / mib
    total = carry_mib + project_mib
    print(f"\ncarried {CARRY.relative_to(ROOT)}: {carry_mib:.1f} MiB ({folder_bytes(SITE) / mib:.1f} MiB unpacked); "
          f"project files: {project_mib:.1f} MiB; together {total:.1f} MiB (limit {LIMIT_MIB:.0f} MiB)")
    if total > LIMIT_MIB:
        problems.append(f"{total:.1f} MiB is over the {LIMIT_MIB:.0f} MiB limit")
    for name, why in not_carried().items():
        print(f"not carried: {name} ({why})")
    if problems:
        print("\nerror: the wheel set is not ready:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        return 1
    print("\nready. On the GPU machine, from the repository root, with this folder carried:")
    print(f"  carry:   [\"{CARRY.relative_to(ROOT)}\"]")
    print(f"  command: {RUN_COMMAND}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
