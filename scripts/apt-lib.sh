# Sourced by the test scripts that need a distribution package (browser.sh: chromium,
# haproxy.sh: haproxy, metrics.sh: prometheus and curl). One place for the apt-get call: as
# root, or through sudo when not root; noninteractive; three attempts, since a fresh CI
# machine's first `apt-get update` sometimes meets a mirror mid-sync.
#
# apt_install WHO PACKAGE...  installs the packages (the caller decides which are missing);
#                             WHO names the script in its messages. Exits 1 when it cannot.

apt_install() {
    local who="$1"
    shift
    echo "$who: installing $* (Debian packages)"
    local as_root=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || { echo "$who: $* missing and no sudo" >&2; exit 1; }
        as_root=(sudo)
    fi
    local attempt
    for attempt in 1 2 3; do
        if "${as_root[@]}" apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq \
                --no-install-recommends "$@" >/dev/null; then
            return 0
        fi
        echo "$who: apt-get failed (attempt $attempt of 3)" >&2
        [ "$attempt" = 3 ] || sleep 10
    done
    exit 1
}
