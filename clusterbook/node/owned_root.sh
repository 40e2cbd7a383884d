# shellcheck shell=sh
# The folders a node gives clusterbook (its roots), judged and claimed on the node: sent inline before anything of
# clusterbook's is there, so plain POSIX sh and coreutils. A root is clusterbook's when it carries the marker
# (.clusterbook-root, a plain file), written when clusterbook creates the root or finds it empty, or when the admin
# accepts it once (invoke accept-folder). Anything else is refused: a link or a file, a folder a package owns (rpm or
# dpkg), one owned by another user, one any user may write, one that holds files clusterbook did not make.
#   owned_root check ROOT...   one line per root: root=ROOT|ok|why or root=ROOT|refused|why (writes nothing)
#   owned_root claim ROOT...   creates a missing root with the marker, marks an empty one; fails at a refused one
#   owned_root accept WHO ROOT...   as claim, and marks a root that holds files (the admin's acceptance, WHO's)

OWNED_ROOT_MARKER=.clusterbook-root

owned_root_package() {  # the package that owns the folder, if any (empty: none, or no package manager)
    if command -v rpm >/dev/null 2>&1 && rpm -qf "$1" >/dev/null 2>&1; then
        rpm -qf --qf '%{NAME}\n' "$1" 2>/dev/null | head -n 1
    elif command -v dpkg >/dev/null 2>&1 && dpkg -S "$1" >/dev/null 2>&1; then
        dpkg -S "$1" 2>/dev/null | head -n 1 | cut -d: -f1
    fi
}

owned_root_judge() {  # mode root -> prints "ok|why" or "refused|why"
    r=$2 m="$2/$OWNED_ROOT_MARKER"
    if [ -f "$m" ] && [ ! -L "$m" ] && [ ! -L "$r" ]; then
        echo "ok|clusterbook's ($(head -c 200 "$m" | tr -d '\n|' | cut -c1-120))"; return
    fi
    if [ -L "$r" ] || { [ -e "$r" ] && [ ! -d "$r" ]; }; then
        echo "refused|a link or a file, not a folder"; return
    fi
    if [ ! -e "$r" ]; then
        echo "ok|missing: created with clusterbook's marker"; return
    fi
    pkg=$(owned_root_package "$r")
    if [ -n "$pkg" ]; then
        echo "refused|the package $pkg owns it"; return
    fi
    owner=$(stat -c %U "$r")
    if [ "$owner" != root ] && [ "$owner" != "$(id -un)" ]; then
        echo "refused|owned by $owner, not root"; return
    fi
    if [ -n "$(find "$r" -maxdepth 0 -perm -0002)" ]; then
        echo "refused|any user may write it (mode $(stat -c %a "$r"))"; return
    fi
    # a marker another node is writing into a shared root this moment is no one else's file
    entries=$(find "$r" -mindepth 1 -maxdepth 1 ! -name "$OWNED_ROOT_MARKER*" | wc -l | tr -d ' ')
    if [ "$entries" -gt 0 ] && [ "$1" != accept ]; then
        echo "refused|holds $entries entries without clusterbook's marker: if the folder is clusterbook's, invoke accept-folder --folder $r records it"
        return
    fi
    echo "ok|$([ "$entries" -gt 0 ] && echo "holds $entries entries, accepted" || echo "empty: marked as clusterbook's")"
}

owned_root() {
    mode=$1; shift
    who=clusterbook
    if [ "$mode" = accept ]; then who="accepted by $1"; shift; fi
    for root in "$@"; do
        verdict=$(owned_root_judge "$mode" "$root")
        if [ "$mode" = check ]; then
            echo "root=$root|$verdict"; continue
        fi
        case $verdict in
            refused*) echo "$(hostname): $root is not clusterbook's folder: ${verdict#refused|}" >&2; return 1 ;;
        esac
        [ -f "$root/$OWNED_ROOT_MARKER" ] && continue
        new="$root/$OWNED_ROOT_MARKER.new.$(hostname).$$"  # its own name: nodes may claim a shared root at once
        (umask 022 && mkdir -p "$root") &&
            printf 'clusterbook-root: %s on %s\n' "$who" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$new" &&
            mv -f "$new" "$root/$OWNED_ROOT_MARKER" || return 1
        [ "$mode" = accept ] && echo "$(hostname): $root: ${verdict#ok|}"
    done
    return 0
}
