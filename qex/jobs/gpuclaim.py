"""The claim of ``--gpu N`` and ``--vram SIZE|guess`` on the pool ``gpu``: how many
devices and how much on each (``qex.jobs.claims.pool_claims`` asks here)."""

from __future__ import annotations

from qex.base import units
from qex.base.errors import SpecError

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.config.keys import PoolDef


def claim(
    ctx: Context,
    gpu: object,
    vram: object,
    command: list,
    template: list | None,
    pool: PoolDef | None,
    sources: dict,
    warnings: list,
) -> tuple[int, int | None]:
    """(devices, bytes on each or None: whole devices). ``--vram guess``: what the
    learner measured of this command (``qex.jobs.learn.vram_guess``, which says so in
    ``sources``); no ``--vram``: ``[defaults] vram``, else whole devices."""
    count = 1 if gpu is None else gpu
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise SpecError(
            f"--gpu: {count!r} is not a number of devices; use a whole number of 1 or more"
            + (" (--gpu 0 cannot go with --vram)" if vram is not None else "")
        )
    if vram == "guess":
        from qex.jobs import learn

        return count, learn.vram_guess(ctx, command, template, pool, sources, warnings)
    size = units.parse_size(str(vram), "--vram") if vram is not None else ctx.config.default_vram
    if vram is not None and size <= 0:
        raise SpecError("--vram: the size must be more than zero, e.g. 20GB")
    return count, size


def no_gpu_pool(where: str) -> str:
    """The refusal of a GPU claim with no pool ``gpu``: with what the driver reports, where one answers."""
    from qex.base import gpus

    reading = gpus.read(timeout=gpus.QUICK)
    if reading is not None and reading.gpus:
        return (
            f"there is no pool 'gpu' in {where}, and this machine's driver reports {reading.summary()}: "
            "run `qex config detect` to see them as a [[pool]], `qex config detect --write` to add it"
        )
    return (
        f"there is no pool 'gpu' in {where}: declare the devices with [[pool]] name = \"gpu\", "
        'devices = ["24GB", ...] to use --gpu or --vram (`qex config detect` writes it where a driver answers)'
    )
