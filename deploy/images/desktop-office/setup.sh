# Runs inside the root filesystem (as root, /bin/sh -eu) after LibreOffice
# is installed and files/ is copied in.

# The LibreOffice profile (files/, copied as root) belongs to the session's
# user, who writes the rest of it at first start.
chown -R user:user /home/user/.config

# Font caches for the fonts LibreOffice brought.
fc-cache -s
