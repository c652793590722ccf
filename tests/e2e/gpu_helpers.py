"""A GPU box for the end-to-end tests, on a machine with none: the fake
nvidia-smi (tests/fakes/nvidia-smi) first on the queue's PATH, answering from a
state file the test writes."""

import json
import os

FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes")
A100 = "NVIDIA A100-SXM4-80GB"


def uuid(n: int, kind: str = "GPU") -> str:
    return f"{kind}-{n:08x}-1111-4222-8333-444444444444"


def gpu(n: int, name: str = A100, mib: int = 81920, **more) -> dict:
    """GPU ``n`` of the fake driver (its index is its place in the list)."""
    return {"uuid": uuid(n), "name": name, "memory_mib": mib, **more}


def fake_driver(q, gpus: list[dict], **state) -> str:
    """Make ``q``'s qex (and its jobs) see a driver that reports ``gpus``; returns
    the state file, which the test may rewrite (``set_driver``)."""
    path = os.path.join(q.root, "nvidia-smi.json")
    set_driver(path, gpus, **state)
    q.env.update(
        PATH=FAKES + os.pathsep + q.env.get("PATH", ""), FAKE_NVIDIA_SMI_STATE=path, QEX_GPU_READER="nvidia-smi"
    )  # never a real NVML where one is installed
    return path


def set_driver(path: str, gpus: list[dict], **state) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"driver": "550.54.15", "gpus": gpus, **state}, fh)
    os.replace(tmp, path)
