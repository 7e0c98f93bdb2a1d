#!/bin/sh
# Check a systemd unit (default: deploy/flashpoint.service, next to this script).
#
# With systemd-analyze: `systemd-analyze verify` on a copy whose ExecStart names a binary that exists here (verify
# refuses a missing one): $FLASHPOINT_BIN, else `flashpoint` on PATH, else this repository's .venv/bin/flashpoint.
# Any error, and any warning about the unit (an unknown key, a value that does not parse), fails the check.
# Without it (or with CHECK_UNIT_STRUCTURAL=1): a structural check of its own: the [Unit], [Service] and [Install]
# sections and no other, every key one this check knows for its section, ExecStart= present and absolute.
#
# Exit status: 0 when the unit passes, 1 when it does not (what is wrong on stderr), 2 on bad usage.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
unit=${1:-"$here/flashpoint.service"}
if [ ! -f "$unit" ]; then
    echo "check-unit: no unit file at $unit" >&2
    exit 2
fi

structural() {
    awk '
        BEGIN {
            known["Unit"] = " Description Documentation Wants Requires After Before BindsTo PartOf Conflicts " \
                "ConditionPathExists AssertPathExists StartLimitIntervalSec StartLimitBurst "
            known["Service"] = " Type User Group SupplementaryGroups DynamicUser EnvironmentFile Environment " \
                "WorkingDirectory StateDirectory StateDirectoryMode CacheDirectory LogsDirectory RuntimeDirectory " \
                "ExecStartPre ExecStart ExecStartPost ExecReload ExecStop KillSignal KillMode TimeoutStartSec " \
                "TimeoutStopSec Restart RestartSec LimitNOFILE LimitMEMLOCK NoNewPrivileges ProtectSystem " \
                "ProtectHome ReadWritePaths ReadOnlyPaths PrivateTmp ProtectKernelTunables ProtectKernelModules " \
                "ProtectControlGroups RestrictSUIDSGID LockPersonality UMask StandardOutput StandardError "
            known["Install"] = " WantedBy RequiredBy Alias Also "
            section = ""; bad = 0
        }
        /^[ \t]*([#;].*)?$/ { next }
        /^\[.*\][ \t]*$/ {
            section = $0; sub(/^\[/, "", section); sub(/\][ \t]*$/, "", section)
            if (!(section in known)) { printf "%s:%d: unknown section [%s]\n", FILENAME, NR, section; bad = 1 }
            seen[section] = 1; next
        }
        {
            if (index($0, "=") == 0) { printf "%s:%d: not key=value: %s\n", FILENAME, NR, $0; bad = 1; next }
            key = substr($0, 1, index($0, "=") - 1); value = substr($0, index($0, "=") + 1)
            gsub(/[ \t]+$/, "", key)
            if (section == "") { printf "%s:%d: %s= before any section\n", FILENAME, NR, key; bad = 1; next }
            if ((section in known) && index(known[section], " " key " ") == 0) {
                printf "%s:%d: unknown key %s= in [%s]\n", FILENAME, NR, key, section; bad = 1
            }
            if (section == "Service" && key == "ExecStart") {
                execs++
                if (value !~ /^[-@:+!]*\//) { printf "%s:%d: ExecStart= must start with an absolute path\n", FILENAME, NR; bad = 1 }
            }
        }
        END {
            split("Unit Service Install", need, " ")
            for (i = 1; i <= 3; i++) if (!(need[i] in seen)) { printf "%s: no [%s] section\n", FILENAME, need[i]; bad = 1 }
            if (execs == 0) { printf "%s: no ExecStart= in [Service]\n", FILENAME; bad = 1 }
            exit bad
        }
    ' "$1" >&2
}

if [ "${CHECK_UNIT_STRUCTURAL:-0}" != 1 ] && command -v systemd-analyze >/dev/null 2>&1; then
    binary=${FLASHPOINT_BIN:-$(command -v flashpoint || true)}
    [ -n "$binary" ] || binary="$here/../.venv/bin/flashpoint"
    if [ ! -x "$binary" ]; then
        echo "check-unit: no flashpoint binary to stand in for ExecStart's (set FLASHPOINT_BIN)" >&2
        exit 2
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    name=$(basename "$unit")
    # ExecStart's binary (the path the README says to adjust) becomes one that exists here; nothing else changes
    sed "s|^\(ExecStart=[-@:+!]*\)[^ ]*|\1$binary|" "$unit" > "$tmp/$name"
    status=0
    output=$(cd "$tmp" && systemd-analyze verify --man=no "./$name" 2>&1) || status=$?
    # a warning about the unit (unknown key, value that does not parse) exits 0: it fails the check all the same
    about=$(printf '%s\n' "$output" | grep -F "$name" || true)
    if [ "$status" -ne 0 ] || [ -n "$about" ]; then
        echo "check-unit: FAILED: systemd-analyze verify $unit (exit $status):" >&2
        printf '%s\n' "$output" >&2
        exit 1
    fi
    [ -z "$output" ] || printf 'check-unit: systemd-analyze noted (not about this unit):\n%s\n' "$output" >&2
    echo "check-unit: $unit passes systemd-analyze verify"
else
    if [ "${CHECK_UNIT_STRUCTURAL:-0}" = 1 ]; then
        echo "check-unit: CHECK_UNIT_STRUCTURAL=1: the structural check only"
    else
        echo "check-unit: systemd-analyze is not installed here: the structural check only"
    fi
    if ! structural "$unit"; then
        echo "check-unit: FAILED: the structural check of $unit" >&2
        exit 1
    fi
    echo "check-unit: $unit passes the structural check (sections and keys)"
fi
