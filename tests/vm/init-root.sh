#!/bin/busybox sh
# /init of the "root" guest of tests/vm/harness.py: busybox as PID 1, the host's / read-only over
# 9p as the root of a chroot, tmpfs on the writable places, the out folder on /tmp, cgroup v2 with
# the memory controller enabled in the root cgroup (no systemd). Runs /tmp/pre-root.sh (if any) and
# /tmp/cmd.sh as root in the root cgroup, then powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /mods/order); do insmod "/mods/$m.ko" 2>/dev/null; done
R=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot $R || { echo "qexvm-init: no 9p root" > /dev/console; poweroff -f; }
mount -t proc proc $R/proc; mount -t sysfs sys $R/sys; mount -t devtmpfs dev $R/dev
mount -t tmpfs run $R/run  # (not /root: an interpreter may live there)
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out $R/tmp || mount -t tmpfs -o mode=1777 tmp $R/tmp
# Folders of the host's /tmp the guest needs (tests/vm/harness.py: hidden_under_tmp), at their own paths.
while read -r tag path; do
  [ -n "$tag" ] && mkdir -p "$R$path" && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 "$tag" "$R$path"
done < "$R/tmp/qexvm-mounts"
mount -t cgroup2 none $R/sys/fs/cgroup
echo "+memory +pids +cpu" > $R/sys/fs/cgroup/cgroup.subtree_control
exec chroot $R /bin/sh -c 'cd /; export HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8
  if [ -f /tmp/pre-root.sh ]; then sh /tmp/pre-root.sh >> /tmp/console.log 2>&1; echo "vm: pre-root rc=$?" >> /tmp/console.log; fi
  sh /tmp/cmd.sh >> /tmp/console.log 2>&1; echo "vm: rc=$?" >> /tmp/console.log
  echo o > /proc/sysrq-trigger; poweroff -f'
