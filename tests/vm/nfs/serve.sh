# tests/vm/test_nfs.py, in a root guest (harness kind "root"): an NFSv4.2 server on loopback
# exporting a tmpfs (the guest's 9p root cannot be exported), mounted twice: /run/a and
# /run/b stand for two machines (nosharecache: a second client view). Delegations are off
# (before nfsd starts): both mounts are one client to the server, which would never recall a
# delegation held through one mount when the other writes, as it would between two machines.
# Then the scenario (nfs/scenario.py) runs with this guest's interpreter.
set -e
ip link set lo up
mkdir -p /run/exp /run/a /run/b
mount -t tmpfs nfsstate /var/lib/nfs
touch /var/lib/nfs/etab /var/lib/nfs/rmtab
modprobe nfsd
mount -t nfsd nfsd /proc/fs/nfsd
echo 0 > /proc/sys/fs/leases-enable
echo 10 > /proc/fs/nfsd/nfsv4gracetime
echo 10 > /proc/fs/nfsd/nfsv4leasetime
mount -t tmpfs -o size=300m exp /run/exp
exportfs -o rw,no_root_squash,fsid=0,sync,no_subtree_check,insecure 127.0.0.1:/run/exp
rpc.mountd --no-nfs-version 2 --no-nfs-version 3 --no-udp
rpc.nfsd --no-nfs-version 3 --no-udp 4
mount -t nfs4 -o vers=4.2,retry=0 127.0.0.1:/ /run/a
mount -t nfs4 -o vers=4.2,nosharecache,retry=0 127.0.0.1:/ /run/b
grep ' nfs4 ' /proc/mounts
exec "$QEX_VM_PYTHON" "$QEX_VM_PROJECT/tests/vm/nfs/scenario.py" /tmp/nfs-result.json
