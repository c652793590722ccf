#!/bin/busybox sh
# /init of the initramfs built by tests/vm/harness.py (busybox, PID 1, before systemd):
#  1. /    = overlay: lower = the host's / over 9p (read-only), upper = tmpfs (lost at power-off)
#     /tmp = the host folder $OUT/tmp over 9p (read-write; the script and its output live there)
#  2. copies the guest-only files (tests/vm/guest/ + unit masks, prepared on the host) into the
#     upper layer, drops the host's own unit enablements, creates the user qexuser
#  3. exec switch_root into /lib/systemd/systemd (it stays PID 1).
# Kernel command line knobs read here: qexvm.uid=N (default: first uid >= 1000 free in both the host's
# passwd and group), qexvm.linger=1 (enable-linger), qexvm.udev=1 (keep udev), qexvm.cache=MODE
# (9p cache of the read-only host root: loose (default) or none).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
die() { echo "qexvm-init: $*" > /dev/console; sleep 1; poweroff -f; }
arg() { for a in $(cat /proc/cmdline); do case "$a" in "$1="*) echo "${a#*=}"; return;; esac; done; echo "$2"; }
for m in $(cat /mods/order); do insmod "/mods/$m.ko" 2>/dev/null; done
echo "qexvm-init: modules loaded at uptime $(cut -d' ' -f1 /proc/uptime)" > /dev/kmsg

P9=trans=virtio,version=9p2000.L,msize=262144
R=/newroot
mount -t 9p -o "$P9,ro,cache=$(arg qexvm.cache loose)" hostroot /lower || die "cannot mount the host root (9p tag hostroot)"
mount -t tmpfs -o mode=755 qexrw /rw && mkdir -p /rw/upper /rw/work || die "tmpfs"
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work qexroot "$R" \
  || die "overlay of 9p (lower) + tmpfs (upper) failed"
mount -t 9p -o "$P9" out "$R/tmp" || die "cannot mount the out folder (9p tag out) on /tmp"
# Folders of the host's /tmp the guest needs (tests/vm/harness.py: hidden_under_tmp), at their own paths.
while read -r tag path; do
  [ -n "$tag" ] && mkdir -p "$R$path" && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 "$tag" "$R$path"
done < "$R/tmp/qexvm-mounts"

# ---- guest-only configuration: all of it lands in the tmpfs upper, the host's files are never written
E=$R/etc S=$R/etc/systemd/system
# The host's own enablements (slurm, munge, postgresql, sysstat, timers, getty, timesyncd...).
rm -rf "$S"/*.wants "$S/dbus-org.freedesktop.timesync1.service"
cp -af /guest/. "$R/"
[ "$(arg qexvm.udev 0)" = 1 ] && rm -f "$S"/systemd-udev*
# The host image is a container image: with /.dockerenv systemd would think it runs in a container
# ("docker": the kernel command line is ignored by generators, container-only unit conditions).
rm -f "$R/.dockerenv" "$R/run/.containerenv"
tr -d - < /proc/sys/kernel/random/uuid > "$E/machine-id"

if ! grep -q "^qexuser:" "$E/passwd"; then
  QID=$(arg qexvm.uid "")
  [ -n "$QID" ] || QID=$(awk -F: '{u[$3]=1} END{n=1000; while (n in u) n++; print n}' "$E/passwd" "$E/group")
  echo "qexuser:x:$QID:$QID:qexvm test user:/home/qexuser:/bin/bash" >> "$E/passwd"
  echo "qexuser:x:$QID:" >> "$E/group"
  echo "qexuser:*:19000:0:99999:7:::" >> "$E/shadow"
  echo "qexuser:!::" >> "$E/gshadow"
fi
QID=$(awk -F: '$1=="qexuser" {print $3}' "$E/passwd")
mkdir -p "$R/home/qexuser"; chown "$QID:$QID" "$R/home/qexuser"; chmod 755 "$R/home/qexuser"
[ "$(arg qexvm.linger 0)" = 1 ] && mkdir -p "$R/var/lib/systemd/linger" && : > "$R/var/lib/systemd/linger/qexuser"

echo "qexvm-init: switch_root to systemd at uptime $(cut -d' ' -f1 /proc/uptime)" > /dev/kmsg
for d in dev proc sys; do mount --move "/$d" "$R/$d"; done
exec switch_root "$R" /lib/systemd/systemd
