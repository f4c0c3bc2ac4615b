#!/bin/sh
# A base image for deploy/Containerfile made from Debian's packages alone, for a machine that
# reaches a Debian mirror but no image registry: bookworm's minimal system with Python 3.11 and
# venv (what the official python:3.11-slim-bookworm image gives the build), its security
# updates applied.
#
#   deploy/base/build-debian-base.sh [IMAGE]     (as root: debootstrap makes device nodes)
#   podman build -f deploy/Containerfile --build-arg BASE=IMAGE -t service-registry .
#
# IMAGE defaults to localhost/registry-base:bookworm. MIRROR and SECURITY_MIRROR choose the
# mirrors (by default this machine's apt sources, else deb.debian.org); ENGINE is the command
# that imports the tree (podman by default; docker works too).
set -eu

image=${1:-localhost/registry-base:bookworm}
suite=bookworm
engine=${ENGINE:-podman}

# The first URI of this machine's Debian sources whose suite is `$1`, in either format.
apt_uri() {
    for file in /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] || continue
        awk -v suite="$1" '
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite && uri) { print uri; exit } }
            /^$/ { uri = "" }' "$file"
    done | head -n 1
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$file" ] || continue
        awk -v suite="$1" '$1 == "deb" && $3 == suite { print $2; exit }' "$file"
    done | head -n 1
}
mirror=${MIRROR:-$(apt_uri "$suite" | head -n 1)}
mirror=${mirror:-http://deb.debian.org/debian}
security=${SECURITY_MIRROR:-$(apt_uri "$suite-security" | head -n 1)}
security=${security:-http://deb.debian.org/debian-security}

root=$(mktemp -d "${TMPDIR:-/tmp}/registry-base.XXXXXX")
# --one-file-system: whatever debootstrap may have left mounted inside is not followed
trap 'rm -rf --one-file-system "$root"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$root" "$mirror"

# debootstrap installs from the release alone; an image must have its security fixes too.
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
chroot "$root" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get upgrade -y -q'

# Nothing the image needs at run time: package lists and archives, manuals, this machine's
# name and resolver (the engine gives each container its own).
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/var/cache/debconf/*-old
rm -f "$root/etc/hostname" "$root/etc/resolv.conf"

tar --numeric-owner -C "$root" -c . | "$engine" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/usr/bin/python3"]' \
    - "$image"
echo "built $image"
