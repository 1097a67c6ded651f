# Sourced by tools/setup.sh and tools/postgres.sh: run a command as root
# (directly, or through password-less sudo). The sourcing script defines
# die() and may set AS_ROOT_HINT (what to do by hand without root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@" || die "'$*' needs root; sudo without a password is not available"
    else
        die "'$*' needs root and sudo is not installed; ${AS_ROOT_HINT:-run it as root}"
    fi
}
