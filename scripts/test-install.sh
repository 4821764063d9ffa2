#!/usr/bin/env bash
# Tries the installers as a user would (part of `make test`): checks the .deb's and .rpm's
# metadata and file lists, installs the .deb on this machine, starts the installed app under
# Xvfb against a sandbox and sees the pools (the GUI test, driving /usr/bin/corral-vdi-console
# through WebDriver), runs the installed CLI, removes the package and checks that nothing but
# user data is left. The broker is not in it (it ships as its image: scripts/broker-image.sh). Needs root or sudo (it installs a package).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
deb=$(ls dist/*.deb)
rpm=$(ls dist/*.rpm)
fail() { echo "test-install: $*" >&2; exit 1; }

# --- the .deb's metadata: maintainer with an address, a long description, the licence,
# dependencies declared once, the helpers as recommendations.
info=$(dpkg-deb --info "$deb")
echo "$info" | grep -q '^ Package: corral-vdi-console$' || fail "package name: $info"
echo "$info" | grep -qE '^ Maintainer: .+ <[^>]+@[^>]+>$' || fail "maintainer without an address: $info"
echo "$info" | grep -q 'The package also installs the corral-vdi command-line' || fail "no long description"
depends=$(echo "$info" | sed -n 's/^ Depends: //p')
for dep in libwebkit2gtk-4.1-0 libgtk-3-0 libusb-1.0-0; do
  [ "$(echo "$depends" | tr ',' '\n' | grep -c "^ *$dep\b")" -eq 1 ] || fail "$dep not declared exactly once: $depends"
done
recommends=$(echo "$info" | sed -n 's/^ Recommends: //p')
for rec in usbredirect virt-viewer freerdp2-x11 openssh-client; do
  echo "$recommends" | grep -q "$rec" || fail "$rec not recommended: $recommends"
done
files=$(dpkg-deb --contents "$deb")
# (dpkg-deb lists paths with or without a leading "./", depending on how the tar was made)
for path in usr/bin/corral-vdi-console usr/bin/corral-vdi; do
  echo "$files" | grep -qE " (\./)?$path$" || fail "$path missing from the .deb"
done
! echo "$files" | grep -q corral-vdi-broker || fail "the broker is in the .deb (it ships as its image)"
for folder in usr/share/applications/ usr/share/icons/hicolor/; do
  echo "$files" | grep -qE " (\./)?$folder.+" || fail "nothing in $folder in the .deb"
done

# --- the .rpm's metadata and file list (rpm -qip / -qlp).
rinfo=$(rpm -qip "$rpm" 2>/dev/null)
echo "$rinfo" | grep -qE '^License *: Apache-2.0' || fail "rpm licence: $rinfo"
echo "$rinfo" | grep -q 'The package also installs the corral-vdi' || fail "rpm description"
rlist=$(rpm -qlp "$rpm" 2>/dev/null)
for path in /usr/bin/corral-vdi-console /usr/bin/corral-vdi; do
  echo "$rlist" | grep -qx "$path" || fail "$path missing from the .rpm"
done
! echo "$rlist" | grep -q corral-vdi-broker || fail "the broker is in the .rpm (it ships as its image)"
echo "$rlist" | grep -q '^/usr/share/applications/.*\.desktop$' || fail "no desktop entry in the .rpm"
rpm -qp --requires "$rpm" 2>/dev/null | grep -q '^libusb1' || fail "the .rpm does not require libusb1"

# --- install the .deb, use it, remove it.
$SUDO apt-get install -y -qq "./$deb" >/dev/null
installed=$(dpkg -L corral-vdi-console)
trap '$SUDO apt-get remove -y -qq corral-vdi-console >/dev/null 2>&1 || true' EXIT
grep -q '^/usr/share/applications/.*\.desktop$' <<<"$installed" || fail "no desktop entry installed"
desktop=$(grep '^/usr/share/applications/.*\.desktop$' <<<"$installed")
grep -q '^Exec=corral-vdi-console' "$desktop" || fail "desktop entry: $(cat "$desktop")"
command -v corral-vdi >/dev/null || fail "corral-vdi is not on PATH"
corral-vdi --version

# The installed app and CLI against a sandbox: the GUI test drives the installed binary. The
# workspace's feature set, as `make test` builds it, so the test binary is the one built there.
CORRAL_APP=/usr/bin/corral-vdi-console CORRAL_CLI=/usr/bin/corral-vdi \
  cargo test --quiet --locked --workspace --all-features --test gui_e2e -- \
  --exact pools::the_installed_app_and_cli_show_the_pools

$SUDO apt-get remove -y -qq corral-vdi-console >/dev/null
trap - EXIT
for path in $(grep -E '^/usr/(bin|share/applications|share/icons)/.+\.(png|desktop)$|^/usr/bin/corral' <<<"$installed"); do
  [ ! -e "$path" ] || fail "$path is left after removal"
done
hash -r  # forget where bash found corral-vdi while it was installed
! command -v corral-vdi >/dev/null || fail "corral-vdi is left on PATH: $(command -v corral-vdi)"
echo "test-install: the .deb installs, starts, shows the pools, and removes cleanly; the .rpm's metadata and files are right"
