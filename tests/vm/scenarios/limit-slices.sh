# Root step: the slices that hold qex's scopes may hold at most 300M (a user's app.slice, the
# system's qex.slice), so that a job that grows without end is killed by the kernel there.
# (A limit on the whole user-UID.slice works the same, but then the kernel reclaims the
# session's own pages over 9p for a minute before it kills: too slow under TCG.)
mkdir -p /etc/systemd/user/app.slice.d
printf '[Slice]\nMemoryMax=300M\n' > /etc/systemd/user/app.slice.d/50-qex-test.conf
mkdir -p /etc/systemd/system/qex.slice.d
printf '[Slice]\nMemoryMax=300M\n' > /etc/systemd/system/qex.slice.d/50-qex-test.conf
systemctl daemon-reload
