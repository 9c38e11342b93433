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

# Font caches that stay valid in the image: fontconfig checks each cache
# against its directory's mtime, and the image's mtimes are clamped to the
# build's time when the root filesystem is packed, so the font directories
# get a time no later than that before the caches are made; -L: the font
# directories that are links (MathJax's, poppler's cMap) are touched too.
find -L /usr/share/fonts /usr/local/share/fonts -type d -exec touch -d "@${SOURCE_DATE_EPOCH:-1}" {} + 2>/dev/null || true
fc-cache -s -f

# The panel's launcher icons, resolved here once: without this cache tint2
# searches every icon directory for them in each new session (seconds).
mkdir -p /home/user/.cache/tint2
for e in chromium:hicolor/32x32/apps/chromium.png firefox-esr:hicolor/32x32/apps/firefox-esr.png \
	lxterminal:hicolor/128x128/apps/lxterminal.png org.xfce.thunar:hicolor/48x48/apps/org.xfce.thunar.png \
	org.xfce.mousepad:hicolor/48x48/apps/org.xfce.mousepad.png \
	view-app-grid-symbolic:Adwaita/scalable/actions/view-app-grid-symbolic.svg; do
	f=/usr/share/icons/${e#*:}
	if [ -f "$f" ]; then printf 'Adwaita\t%s\t28=%s\n' "${e%%:*}" "$f"; fi
done >/home/user/.cache/tint2/icon.cache
chown -R user:user /home/user/.cache

# A machine id for D-Bus and the browsers.
dbus-uuidgen --ensure=/etc/machine-id
cp /etc/machine-id /var/lib/dbus/machine-id

# Chromium as the default browser for xdg-open and the menu.
update-alternatives --set x-www-browser /usr/bin/chromium
