# Runs inside the new root filesystem (as root, /bin/sh -eu) after the packages
# are installed and files/ is copied in.

# The session's user: uid/gid 1000, passwordless sudo.
useradd --create-home --uid 1000 --user-group --shell /bin/bash --groups sudo user
chmod 440 /etc/sudoers.d/user
visudo -cq

# Accessibility on by default for every GTK app (the schema override in files/).
glib-compile-schemas /usr/share/glib-2.0/schemas

# Icon caches for the panel and menu.
for d in /usr/share/icons/*/; do
	[ -f "$d/index.theme" ] && gtk-update-icon-cache -q -f "$d" 2>/dev/null || true
done
fc-cache -s

# A machine id for D-Bus and the browsers.
dbus-uuidgen --ensure=/etc/machine-id
cp /etc/machine-id /var/lib/dbus/machine-id

# Chromium as the default browser for xdg-open and the menu.
update-alternatives --set x-www-browser /usr/bin/chromium
