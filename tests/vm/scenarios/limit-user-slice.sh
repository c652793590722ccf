# Root step: the session user's slice may hold at most 350M, as an admin may set for a shared
# machine; a job that grows without end is then killed by the kernel inside that slice.
uid=$(id -u qexuser)
mkdir -p /etc/systemd/system/user-$uid.slice.d
printf '[Slice]\nMemoryMax=350M\n' > /etc/systemd/system/user-$uid.slice.d/50-qex-test.conf
mkdir -p /etc/systemd/system/qex.slice.d
printf '[Slice]\nMemoryMax=300M\n' > /etc/systemd/system/qex.slice.d/50-qex-test.conf
systemctl daemon-reload
