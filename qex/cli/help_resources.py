"""The text of `qex help resources` (its own module: the longest topic)."""

RESOURCES = """\
A job starts only when its claims fit, together with everything running:

  --cpu N|guess|half|full|max      cores (guess/half = half the budget, full/max = all)
  --mem SIZE|guess|half|full|max   memory; SIZE like 512MB, 2GB, 1.5GiB (powers of 1024);
                                   a bare number is bytes (under 1MiB: a warning)
  --gpu N, --vram SIZE|guess       devices of the pool `gpu` (declared in the config);
                                   guess: the VRAM qex measured of this command's runs
  --claim NAME=N[:SIZE]            units of any pool (SIZE: per device of an indexed pool)
  --lock NAME                      one unit of NAME; a name no pool declares is a lock

Budget: [budget] cpu and mem, a percentage or an absolute value (default 75%;
[enforce] mode = "single-user": 90%). Memory must also fit the machine's
available memory minus [system] reserve_mem (default: 10% of the machine's
memory, at most 2GB; single-user: at most 512MB); a job that waits on the
reserve says so and names the setting. A claim no idle machine could hold --
more memory than it has less the reserve, more cores than it has -- is
refused at submission (121, with the machine's size), whatever [queue]
oversized says.

Given both --cpu and --mem, a job gets QEX_CPU, QEX_MEM, OMP_NUM_THREADS,
GOMAXPROCS and the other thread counts (never over a value it has): whole
numbers, the cores rounded down, at least 1, so make -j"$QEX_CPU" works.

No claim: [defaults] cpu (1 core) and mem (the machine's memory / cores),
or, for memory, what qex learned about this command: the largest peak of its
last completed runs plus [learn] margin, at least twice a claim that was once
too small, capped at the budget (claim_source says "learned from N runs").
--mem always wins; [learn] enabled = false turns learning off.

Out of memory: a job the kernel stops for memory ends its attempt `oom` and is
retried with its memory claim doubled (capped at the budget and at what the
machine holds), --oom-retries N times (default 1; 0 = report only). The
message says the claim of X was too small and what the retry claims; out of
retries the job ends oom (exit 99). When the job reached less than its claim,
the memory ran out outside it: the message names the limit (the cgroup qex
runs in, with its size, or the machine's), never calls the claim too small,
and a retry keeps the same claim (none when that cgroup holds no more than
the claim).
A job runs in its own memory cgroup where the machine allows it (nested in
qex's own), which gives the peak of its whole process tree and exact OOM
evidence; `oom_evidence` in the record says what the verdict rests on.

Pools ([[pool]] in the config): `count = N` (plain) or `devices = ["24GB", ...]`
(indexed; a device may be `{ size = ..., index = N }` or `{ size = ...,
uuid = "GPU-..." | "MIG-..." }`). An indexed pool admits a job when enough
single devices each have the claimed size free: VRAM is never added across
devices, so four 24GB devices are not 96GB for one job. No --vram takes whole
devices. The job gets the pool's `env` variable(s) (CUDA_VISIBLE_DEVICES for
gpu; a list gets the same value in each) naming its devices by index or UUID,
CUDA_DEVICE_ORDER=PCI_BUS_ID beside indices (index N is nvidia-smi's GPU N),
QEX_GPU_DEVICES and QEX_GPU_VRAM; devices are chosen most-free-first, lowest
index on a tie. No driver is needed: a machine with no GPU schedules GPU
claims from the config.

The fence: with a pool gpu declared, a job with no GPU claim gets its
variables set to no device (CUDA_VISIBLE_DEVICES="", ROCm's -1), whatever the
caller exported; `fence = false` in the pool leaves them as captured. It is a
convention CUDA honours, not isolation (see docs/gpus.md).

`qex config detect` prints this machine's GPUs as a [[pool]] block (NVML or
nvidia-smi; amd-smi/rocm-smi); `--write` adds it to the config file, once.
A --gpu claim with no pool gpu on a machine whose driver answers names it;
`qex info` says where the config and the driver disagree.

VRAM measured: where the driver answers (NVML, or nvidia-smi
--query-compute-apps), a GPU job's supervisor samples the VRAM its processes
use ~1 s after the start, then every [gpu] sample_every (5s): usage.vram_peak
(the most on one device) and usage.vram_peak_by_device; `qex status` shows it
beside the claim. A job above its --vram (or on a device it was not given) is
said so at once in `vram_over`, in `qex status`, `qex list` and the events
(change "vram"), and admission counts its use, not its claim, on that device.
--vram guess claims the largest peak qex measured of the command, plus
[learn] margin (nothing measured yet: whole devices).

VRAM outside qex: a process on a device that belongs to no running qex job
(of any user) takes that device's capacity, like memory outside qex; a claim
that cannot fit beside it waits with "VRAM outside qex", the device and how
much, and starts once it is gone (the waker looks again). A process a job left
behind is named as that job's. The driver is read only for a pass that has a
GPU claim to admit, at most once per [gpu] observe_every (5s, kept in the state
directory), never waiting on it more than 2 s.

Larger than the budget: [queue] oversized = run-when-idle (runs alone when
nothing else runs, forced: true), reject, or queue.

Queue order: higher --priority first, then submission order. When the front
job cannot start because this queue's jobs hold what it needs, at most
[queue] max_bypass (default 2) later jobs may start past it (the record's
passed_by counts them); then nothing starts before it, and the jobs behind
say "held for job X". When another user (a peer) or memory used outside qex
holds it, the jobs behind keep starting, and the front job's reason says
"this job cannot fit while another user holds capacity" with how much.
`qex info` ends with one line: running / waits for another user / held for
job X / stuck, and since when.

Several users on one machine -- two set-ups:

1. Each user keeps a private state directory (the default). The queues see
   each other through the peer directory ([peers] dir, QEX_PEER_DIR, default
   /tmp/qex-peers, made with mode 1777). Each queue publishes one record of
   what its running jobs hold (cores, memory, pool units, device indices;
   never locks), and every pass subtracts the other records from the budget
   and the pools. A job counts only while its supervisor holds its lock file
   there, so a queue whose qex processes died stops counting by itself.
   Promises: no user's queue overfills the machine while the others' qex
   processes live; a job waiting for another user says so and never parks
   the jobs behind it; nothing in the peer directory can make a queue run
   anything or follow a link (odd files are ignored, with a reason in
   qex info). Not promised: one order across users (each queue keeps its
   own), or accounting for a queue whose qex processes were killed.

2. Several users share one state directory: one queue, one order, one
   budget. Make it once: qex init --shared DIR --group G, then each member
   sets QEX_STATE_DIR=DIR (and all use the same config, so all compute one
   budget). Each member's qex writes only in a directory of its own in DIR
   (member-UID, which only they can change) and starts only their jobs; a
   pass that admits another member's job reserves its capacity while a qex
   of that member lives, and their qex starts it within about a second.
   Promises: no member's qex runs, signals on the word of, rewrites or
   trusts unchecked anything another member wrote; nobody can kill,
   cancel, clean, rerun or read the environment or logs of another
   member's job (root reads; it changes only as the owner would: sudo -u);
   a name names your own jobs (another's: USER/NAME or its id); only the
   directory's owner (or root) pauses the whole queue. Not promised: a
   member who holds the queue lock or fills the budget slows the others
   down (qex names who holds the lock after 2 s).
"""
