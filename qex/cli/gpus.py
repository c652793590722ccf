"""``qex config detect [--write] [--uuid] [--json]``: the machine's GPUs as a
``[[pool]]`` block, and the one line of ``qex info`` on the GPUs (where the
config and the driver disagree). The driver is read by ``qex.base.gpus``; the
words are ``qex.config.detect``'s."""

from __future__ import annotations

from qex.cli.common import err, out, print_json

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

    from qex.base.gpu_model import Reading
    from qex.config.context import Context

NO_DRIVER = (
    "no GPU driver answers on this machine (no NVML through nvidia-ml-py, no nvidia-smi, amd-smi or "
    'rocm-smi on PATH); declare the devices by hand: [[pool]] name = "gpu", devices = ["24GB", ...]'
)


def cmd_detect(args: Namespace) -> int:
    from qex.base import gpus
    from qex.config import detect

    reading = gpus.read(timeout=gpus.PATIENT)
    if reading is None or reading.error:
        err(f"qex config detect: {reading.error if reading is not None else NO_DRIVER}")
        return 1
    text = detect.block(reading, args.uuid)
    devices = detect.found(reading)[0]
    if args.write:
        return _write(reading, text, len(devices))
    if args.json:
        print_json(
            {
                "vendor": reading.vendor,
                "source": reading.source,
                "driver": reading.driver,
                "gpus": [_gpu_json(g) for g in reading.gpus],
                "pool": text if devices else None,
            }
        )
    else:
        out(text.rstrip("\n"))
    return 0 if devices else 1


def _gpu_json(g) -> dict:
    return {
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "memory": g.memory,
        "mig_on": g.mig_on,
        "mig": [{"uuid": m.uuid, "profile": m.profile, "memory": m.memory, "exact": m.exact} for m in g.mig],
    }


def _write(reading: Reading, text: str, count: int) -> int:
    import stat

    from qex.config import detect
    from qex.config import text as config_text
    from qex.config.file import load_config

    config = load_config()  # a file that does not load (or that others could change) is refused here
    pool = config.pool("gpu")
    if pool is not None:
        diffs = detect.differences(pool, reading, strict=True)
        if not diffs:
            err(f"qex config detect: {config.path} already declares these GPUs; nothing changed")
            return 0
        err(f"qex config detect: {config.path} declares a pool 'gpu' that differs from this machine; nothing changed:")
        for d in diffs:
            err(f"  {d}")
        err(
            "edit that [[pool]] (`qex config detect` prints what this machine has), or remove it and run "
            "`qex config detect --write` again"
        )
        return 1
    if not count:
        err("qex config detect: the driver reports no device to declare; nothing changed")
        return 1
    stat_out: list = []
    before = config_text.read_text(config.path, stat_out)
    mode = stat.S_IMODE(stat_out[0].st_mode) if stat_out else 0o644
    detect.add_to(config.path, before, text, mode)
    err(f'qex config detect: added [[pool]] name = "gpu" ({count} device{"s" if count != 1 else ""}) to {config.path}')
    return 0


def info_line(ctx: Context) -> tuple[str, dict] | None:
    """``qex info``'s line on the GPUs, and its JSON: the driver against the pool
    ``gpu``; None where no pool ``gpu`` is declared and no driver is here. The
    driver's report is kept in the state directory and read again at most once
    per ``[gpu] observe_every`` (``qex.queue.gpuseen.reading``)."""
    from qex.config import detect
    from qex.queue import gpuseen

    pool = ctx.config.pool("gpu")
    reading = gpuseen.reading(ctx)
    if reading is None:
        if pool is None:
            return None
        return "no GPU driver answers here: the pool 'gpu' is scheduled from the config", {"driver": None}
    facts = {
        "driver": {
            "vendor": reading.vendor,
            "source": reading.source,
            "version": reading.driver,
            "gpus": len(reading.gpus),
            "error": reading.error or None,
        }
    }
    if reading.error:
        return f"the driver did not answer ({reading.error})", facts
    diffs = detect.differences(pool, reading)
    facts["disagree"] = diffs
    if pool is None and not reading.gpus:
        return None
    if not diffs:
        return f"the config agrees with the driver: {reading.summary()}, read through {reading.source}", facts
    return (
        f"the config and the driver disagree: {'; '.join(diffs)} (`qex config detect` shows what the driver reports)"
    ), facts
