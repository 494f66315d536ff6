#!/usr/bin/env bash
# Shared by the scripts that run ON the H200 machine (run_matrix.sh, run_e2e.sh): receiving the
# carry (stash each part outside the work tree, join, verify sha256, unpack the site) and small
# helpers. Source it after setting STASH and SITE and defining `say`.

stash_parts() {
    [[ -f .carry/SHA256SUMS ]] || return 0
    if [[ -f $STASH/SHA256SUMS ]] && ! cmp -s .carry/SHA256SUMS "$STASH/SHA256SUMS"; then
        say "a different carry than the stashed one: dropping the old parts"
        rm -f "$STASH"/parts/part-* "$STASH/SHA256SUMS"
    fi
    cp .carry/SHA256SUMS .carry/manifest.json "$STASH/"
    local part
    for part in .carry/part-*; do
        [[ -f $part ]] || continue
        if (cd .carry && grep " ${part##*/}\$" SHA256SUMS | sha256sum --check --status); then
            cp "$part" "$STASH/parts/" && say "stashed ${part##*/} (sha256 ok)"
        else
            say "ERROR: ${part##*/} does not match its sha256; send it again"
            exit 1
        fi
    done
}

parts_missing() {
    local file missing=()
    while read -r _ file; do
        [[ -f $STASH/parts/$file ]] || missing+=("$file")
    done < "$STASH/SHA256SUMS"
    echo "${missing[*]}"
}

install_site() {
    local bundle_sha
    bundle_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bundle_sha256"])' \
        "$STASH/manifest.json")
    if [[ -f $SITE/.bundle-sha256 && $(cat "$SITE/.bundle-sha256") == "$bundle_sha" ]]; then
        say "site already unpacked ($SITE)"
        return 0
    fi
    (cd "$STASH/parts" && sha256sum --check --quiet ../SHA256SUMS) || { say "ERROR: a stashed part is corrupt"; exit 1; }
    local joined
    joined=$(cd "$STASH/parts" && cat $(awk '{print $2}' ../SHA256SUMS | sort) | tee "$STASH/bundle.tar" | sha256sum | cut -d' ' -f1)
    if [[ $joined != "$bundle_sha" ]]; then
        say "ERROR: joined bundle sha256 $joined, manifest says $bundle_sha"
        exit 1
    fi
    say "bundle sha256 ok; unpacking"
    rm -rf "$SITE" "$STASH/bundle" && mkdir -p "$SITE" "$STASH/bundle"
    tar -xf "$STASH/bundle.tar" -C "$STASH/bundle" && rm -f "$STASH/bundle.tar"
    local archive pids=()
    for archive in "$STASH"/bundle/carry/*.tar.xz; do
        tar -xJf "$archive" -C "$SITE" & pids+=($!)
    done
    local pid
    for pid in "${pids[@]}"; do wait "$pid" || { say "ERROR: unpacking failed"; exit 1; }; done
    echo "$bundle_sha" > "$SITE/.bundle-sha256"
    say "site unpacked: $(du -sh "$SITE" | cut -f1)"
}

# Stash this call's parts; once all are stashed, join + verify + unpack. Returns 0 when the site
# is ready, 3 when parts are still missing (the caller exits 0 and waits for the next call).
carry_ready() {
    stash_parts
    if [[ ! -f $STASH/SHA256SUMS ]]; then
        say "nothing stashed and no .carry/ here: send the parts first (gpu/README.md)"
        exit 1
    fi
    local missing
    missing=$(parts_missing)
    if [[ -n $missing ]]; then
        say "waiting for: $missing (send the next part with the same command)"
        return 3
    fi
    install_site
}

stop_group() { # pgid
    kill -TERM -- "-$1" 2>/dev/null || return 0
    local waited=0
    while kill -0 -- "-$1" 2>/dev/null && ((waited < STOP_GRACE_S)); do sleep 1; waited=$((waited + 1)); done
    kill -KILL -- "-$1" 2>/dev/null
    sleep 1
}

gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
