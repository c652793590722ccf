"""Throw-away Linux guests for real-kernel checks (cgroup v2, systemd, NFS): ``run_vm``.

The guest boots the host's installed Debian kernel under QEMU (TCG: KVM hangs on the
nested hosts this was made on) with the host's ``/`` shared read-only over 9p, so it
runs this very checkout with the very interpreter that runs the tests. Nothing on the
host is written except a work folder whose ``tmp/`` is the guest's ``/tmp``
(``VmResult.out``). Three kinds:

- ``systemd-user``: systemd 252 as PID 1 (``init-systemd.sh``: an overlay of the 9p root
  and a tmpfs), cgroup v2 only; the script runs as ``qexuser`` (the first free uid from
  1000, 1001 on the image this was made on) in a PAM login session, as an ssh login
  would: ``/user.slice/user-UID.slice/session-1.scope``, with a user manager and a
  session bus (``guest/etc/systemd/system/qexvm-user.service``, ``guest/etc/pam.d/qexvm``);
- ``systemd-root``: the same guest, the script as root in a system service
  (``/system.slice/qexvm-root.service``);
- ``root``: busybox as PID 1, a chroot into the 9p root, cgroup v2 with ``memory``
  enabled in the root cgroup, the script as root in the root cgroup (``init-root.sh``).

``pre_root`` (any kind) is a script run as root just before the script; its output and a
line ``vm: pre-root rc=N`` come first in the console. The script runs with ``sh`` and
gets ``QEX_VM_PYTHON`` (this interpreter), ``QEX_VM_PROJECT`` (this checkout, also on
``PYTHONPATH``) and ``QEX_VM_KIND``. In the systemd guests the folders above the
interpreter and the checkout are made traversable for ``qexuser`` first (``/root`` is
mode 700 where pyenv lives under it): in the guest's overlay only.

Timings on a loaded 2-core host (TCG): a trivial script, start to power-off, ~20 s for
``systemd-user``, ~17 s ``systemd-root``, ~6 s ``root``. Boot as few times as you can:
one guest per scenario script.

A guest whose kernel locks up (a soft lockup of 60 s or more in the serial log: seen once
in CI, both vCPUs of the NFS guest spinning in the kernel for 7 minutes) is stopped at
once and booted again, once, with a warning; a second lockup fails the test. The first
boot's serial log stays beside the second's (``serial-lockup-1.log``); the kernel's
warnings, stacks among them, go there (``loglevel=5``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import lzma
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
KINDS = ("systemd-user", "systemd-root", "root")
MODULES = (
    "netfs fscache 9pnet 9p virtio_ring virtio 9pnet_virtio virtio_pci_modern_dev "
    "virtio_pci_legacy_dev virtio_pci overlay"
).split()
ACCEL = os.environ.get("QEX_VM_ACCEL", "-accel tcg,thread=multi -cpu max").split()


@dataclasses.dataclass
class VmResult:
    rc: int  # the script's exit status (its last line "vm: rc=N"); 124: the guest ran out of time; -1: no rc
    console: str  # the script's stdout and stderr (pre_root's first), then "vm: rc=N"
    out: pathlib.Path  # the guest's /tmp, on the host
    seconds: float = 0.0  # start to power-off


LOCKUP = re.compile(rb"watchdog: BUG: soft lockup - CPU#\d+ stuck for (\d+)s![^\r\n]*")
LOCKUP_SECONDS = 60  # (a spin this long is the guest kernel's own, not a host that starved it a moment)
LOCKUP_BOOTS = 2  # (a guest kernel that locks up is booted again once; a second lockup fails the test)


def kernel_version() -> str | None:
    """The newest kernel with both its image in /boot and its modules."""
    try:
        versions = [v for v in os.listdir("/lib/modules") if os.path.exists(f"/boot/vmlinuz-{v}")]
    except OSError:
        return None
    if not versions:
        return None

    def key(v: str):
        return [int(p) if p.isdigit() else p for p in re.split(r"[.-]", v)]

    return sorted(versions, key=key)[-1]


def skip_reason() -> str | None:
    """Why no guest can run here (None: one can)."""
    if sys.platform != "linux":
        return "the VM tests need Linux"
    if os.geteuid() != 0:
        return "the VM tests run as root (the guest reads the host's / over 9p with its owners)"
    missing = [
        name
        for name, found in (
            ("qemu-system-x86_64 (apt-get install qemu-system-x86)", shutil.which("qemu-system-x86_64")),
            ("busybox (apt-get install busybox-static)", _busybox()),
            ("cpio (apt-get install cpio)", shutil.which("cpio")),
            ("modinfo (apt-get install kmod)", shutil.which("modinfo") or os.path.exists("/sbin/modinfo")),
            ("a kernel in /boot with its modules (apt-get install linux-image-amd64)", kernel_version()),
        )
        if not found
    ]
    if missing:
        return "no " + ", no ".join(missing)
    return None


def _busybox() -> str | None:
    for path in (shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"):
        if path and os.path.exists(path):
            return path
    return None


def _cache_dir() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("QEX_VM_CACHE") or f"/tmp/qex-vm-cache-{os.geteuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _vmlinux(k: str) -> str:
    """The kernel as a plain ELF image, unpacked once from the bzImage: QEMU boots it through
    its PVH entry, without SeaBIOS and the xz decompression (~6 s under TCG). Falls back to
    the bzImage."""
    bz = f"/boot/vmlinuz-{k}"
    out = _cache_dir() / f"vmlinux-{k}"
    if out.exists() and out.stat().st_mtime >= os.stat(bz).st_mtime:
        return str(out)
    data = pathlib.Path(bz).read_bytes()
    at = data.find(b"\xfd7zXZ\x00")
    try:
        elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[at:]) if at >= 0 else b""
    except lzma.LZMAError:
        elf = b""
    if elf[:4] != b"\x7fELF":
        return bz
    tmp = out.with_suffix(f".{os.getpid()}")
    tmp.write_bytes(elf)
    tmp.replace(out)
    return str(out)


def _sources_key(k: str) -> str:
    h = hashlib.sha256(k.encode())
    for path in sorted([HERE / "init-systemd.sh", HERE / "init-root.sh", *(HERE / "guest").rglob("*")]):
        if path.is_file():
            h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes())
    h.update(str(os.stat(_busybox()).st_mtime).encode())
    return h.hexdigest()[:16]


def _initrd(kind: str, k: str) -> str:
    """The initramfs of this kind of guest, built once per change of its sources."""
    flavour = "root" if kind == "root" else "systemd"
    out = _cache_dir() / f"initrd-{flavour}-{_sources_key(k)}.gz"
    if out.exists():
        return str(out)
    with tempfile.TemporaryDirectory(prefix="qexvm-ir-") as ir:
        root = pathlib.Path(ir)
        for d in ("bin", "proc", "sys", "dev", "run", "mods", "lower", "rw", "newroot"):
            (root / d).mkdir()
        shutil.copy(_busybox(), root / "bin/busybox")
        for m in MODULES:
            src = subprocess.run(
                ["modinfo", "-k", k, "-n", m], capture_output=True, text=True, check=True
            ).stdout.strip()
            shutil.copy(src, root / f"mods/{m}.ko")
        (root / "mods/order").write_text(" ".join(MODULES) + "\n")
        shutil.copy(HERE / f"init-{flavour}.sh", root / "init")
        os.chmod(root / "init", 0o755)
        if flavour == "systemd":
            _guest_tree(root / "guest")
        listing = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
        archive = subprocess.run(
            ["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"],
            cwd=root,
            input=listing,
            capture_output=True,
            check=True,
        ).stdout
    import gzip

    tmp = out.with_suffix(f".{os.getpid()}")
    tmp.write_bytes(gzip.compress(archive, compresslevel=1))
    tmp.replace(out)
    return str(out)


def _guest_tree(dest: pathlib.Path) -> None:
    """guest/ plus the masks (links to /dev/null) that /init copies into the guest's /."""
    shutil.copytree(HERE / "guest", dest, symlinks=True)
    for path in dest.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    systemd = dest / "etc/systemd"
    for unit in _words(HERE / "guest/etc/qexvm/masks"):
        (systemd / "system" / unit).symlink_to("/dev/null")
    for gen in _words(HERE / "guest/etc/qexvm/masked-generators"):
        (systemd / gen).parent.mkdir(parents=True, exist_ok=True)
        (systemd / gen).symlink_to("/dev/null")
    (systemd / "system/default.target").symlink_to("/lib/systemd/system/multi-user.target")


def _words(path: pathlib.Path) -> list[str]:
    return [w for line in path.read_text().splitlines() if not line.startswith("#") for w in line.split()]


def reachable_paths() -> list[str]:
    """What the guest's qexuser must be able to reach: this interpreter (the venv's link and
    what it points to), its prefixes, and this checkout."""
    paths = {sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, str(PROJECT)}
    return sorted(p for p in paths if p)


def _reach_script() -> str:
    """A root step: every folder above those paths gets o+x (and the paths o+rx), in the guest only."""
    lines = ["# tests/vm/harness.py: let qexuser reach the interpreter and the checkout (overlay only)"]
    for path in reachable_paths():
        parts = pathlib.PurePath(path).parts
        for i in range(2, len(parts) + 1):
            folder = str(pathlib.PurePath(*parts[:i]))
            lines.append(f"[ -d {shlex.quote(folder)} ] && chmod o+rx {shlex.quote(folder)}")
    return "\n".join(lines) + "\n: \n"


def hidden_under_tmp() -> list[str]:
    """The folders right below /tmp that hold a path the guest needs (a checkout or a venv made
    in /tmp, as a CI runner may): the guest's /tmp is the out folder, which would hide them, so
    each is shared on its own and mounted at its own path in the guest (``/tmp/qexvm-mounts``)."""
    found = set()
    for path in reachable_paths():
        parts = pathlib.PurePath(os.path.realpath(path) if path.startswith("/tmp/") else path).parts
        if len(parts) > 2 and parts[:2] == ("/", "tmp"):
            found.add(str(pathlib.PurePath(*parts[:3])))
    return sorted(found)


def _header(kind: str) -> str:
    env = {
        "QEX_VM_PYTHON": sys.executable,
        "QEX_VM_PROJECT": str(PROJECT),
        "QEX_VM_KIND": kind,
        "PYTHONPATH": str(PROJECT),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def run_vm(
    script: pathlib.Path,
    *,
    kind: str = "systemd-user",
    mb: int = 2048,
    pre_root: pathlib.Path | None = None,
    timeout: float = 300,
    linger: bool = False,
    journal: bool = False,
    workdir: pathlib.Path | None = None,
    cpus: int = 2,
) -> VmResult:
    """Boot a guest of ``kind``, run ``script`` (with ``sh``) in it, power off; see the module doc.

    ``linger``: ``loginctl enable-linger`` for qexuser at boot; ``journal``: the guest's
    journal in ``out/journal.log`` (systemd kinds); ``workdir``: the host folder whose
    ``tmp/`` is the guest's /tmp (default: a new temporary folder, kept for inspection)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    why = skip_reason()
    if why:
        raise RuntimeError(f"no VM here: {why}")
    work = pathlib.Path(workdir) if workdir else pathlib.Path(tempfile.mkdtemp(prefix="qexvm-"))
    for boot in range(1, LOCKUP_BOOTS):
        res, lockup = _boot(script, kind, mb, pre_root, timeout, linger, journal, work, cpus)
        if lockup is None:
            return res
        # The guest kernel itself spun with preemption off (seen once in CI, both vCPUs, in the NFS
        # guest: "soft lockup ... [python:151]"), which nothing in a guest's user space can do on a
        # sound kernel: said, and booted again, rather than waiting out the timeout.
        import warnings

        warnings.warn(f"the {kind} guest's kernel locked up ({lockup}); booted again", stacklevel=2)
        shutil.copy(work / "serial.log", work / f"serial-lockup-{boot}.log")
    res, lockup = _boot(script, kind, mb, pre_root, timeout, linger, journal, work, cpus)
    if lockup is not None:
        res.console += f"\nvm: the guest kernel locked up in every boot: {lockup}\n"
    return res


def _boot(script, kind, mb, pre_root, timeout, linger, journal, work, cpus) -> tuple[VmResult, str | None]:
    """One boot of ``run_vm``; the line of a guest kernel lockup (then QEMU is stopped at once), or None."""
    k = kernel_version()
    out = work / "tmp"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    os.chmod(out, 0o1777)
    (out / "cmd.sh").write_text(_header(kind) + pathlib.Path(script).read_text())
    pre = (_reach_script() if kind == "systemd-user" else "") + (pathlib.Path(pre_root).read_text() if pre_root else "")
    if pre:
        (out / "pre-root.sh").write_text(pre)
    for name in ("cmd.sh", "pre-root.sh"):
        if (out / name).exists():
            os.chmod(out / name, 0o644)
    append = "console=ttyS0 quiet loglevel=5 panic=-1 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1"
    if kind != "root":
        unit = "qexvm-user" if kind == "systemd-user" else "qexvm-root"
        append += f" systemd.show_status=auto systemd.wants=qexvm-after-boot@{unit}.service qexvm.cache=loose"
        append += " qexvm.linger=1" if linger else ""
        append += " qexvm.journal=1" if journal else ""
    argv = [
        "qemu-system-x86_64",
        *ACCEL,
        "-smp",
        str(cpus),
        "-m",
        str(mb),
        "-nographic",
        "-no-reboot",
        "-nic",
        "none",
        "-kernel",
        _vmlinux(k),
        "-initrd",
        _initrd(kind, k),
        "-append",
        append,
        "-virtfs",
        "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={out},mount_tag=out,security_model=none",
    ]
    mounts = []
    for i, folder in enumerate(hidden_under_tmp()):
        argv += ["-virtfs", f"local,path={folder},mount_tag=hosttmp{i},security_model=none,readonly=on,multidevs=remap"]
        mounts.append(f"hosttmp{i} {folder}\n")
    (out / "qexvm-mounts").write_text("".join(mounts))
    start = time.monotonic()
    timed_out, lockup = False, None
    with open(work / "serial.log", "wb") as serial:
        qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=serial, stderr=subprocess.STDOUT)
        try:
            while qemu.poll() is None:
                if time.monotonic() - start > timeout:
                    timed_out = True
                    break
                spins = [m for m in LOCKUP.finditer((work / "serial.log").read_bytes()) if int(m[1]) >= LOCKUP_SECONDS]
                if spins:
                    lockup = spins[0].group().decode(errors="replace")
                    break
                time.sleep(1)
        finally:
            if qemu.poll() is None:
                qemu.kill()
            qemu.wait()
    seconds = time.monotonic() - start
    try:
        console = (out / "console.log").read_text(errors="replace")
    except OSError:
        console = "no console.log; the end of serial.log:\n" + (work / "serial.log").read_text(errors="replace")[-4000:]
    found = re.findall(r"^vm: rc=(\d+)$", console, re.M)
    rc = int(found[-1]) if found else (124 if timed_out else -1)
    return VmResult(rc=rc, console=console, out=out, seconds=seconds), lockup


if __name__ == "__main__":  # python tests/vm/harness.py SCRIPT [KIND]: run one script, print its console
    reason = skip_reason()
    if reason:
        sys.exit(f"no VM here: {reason}")
    res = run_vm(pathlib.Path(sys.argv[1]), kind=sys.argv[2] if len(sys.argv) > 2 else "systemd-user")
    print(res.console)
    print(f"harness: rc={res.rc} in {res.seconds:.1f} s; out {res.out}", file=sys.stderr)
    sys.exit(0 if res.rc == 0 else 1)
