#!/bin/sh
# scg-entrypoint: renders a per-replica scg.yaml from a config template and
# starts scg with it. scg itself reads no environment variables for its
# config, so the values that differ per pod (node name, pod IP) or must not
# sit in a ConfigMap (the cluster identity) are filled in here.
#
#   scg-entrypoint [SCG-ARGS...]   render, then exec scg --config RENDERED SCG-ARGS...
#   scg-entrypoint --check         render, then exec scg --check-config RENDERED
#   scg-entrypoint --version | --config FILE | --check-config FILE
#                                  exec scg with these arguments, no rendering
#
# Environment:
#   SCG_CONFIG_TEMPLATE   template to render   (default /etc/scg/scg.yaml)
#   SCG_CONFIG            rendered file        (default /run/scg/scg.yaml)
#   SCG_BIN               the scg binary       (default /usr/local/bin/scg)
#
# Every ${SCG_NAME} placeholder in the template (upper-case letters, digits
# and '_') is replaced by the environment variable SCG_NAME; a placeholder
# whose variable is unset or empty is an error. SCG_NODE_NAME defaults to
# the host name (a StatefulSet pod's host name is its pod name). Values are
# escaped for single-quoted YAML scalars, so placeholders belong inside
# '...'. Trailing newlines are dropped (a Secret made with --from-file often
# has one); any other newline is an error. SCG_CLUSTER_IDENTITY is removed
# from scg's environment once it is rendered.
set -eu

template=${SCG_CONFIG_TEMPLATE:-/etc/scg/scg.yaml}
out=${SCG_CONFIG:-/run/scg/scg.yaml}
bin=${SCG_BIN:-/usr/local/bin/scg}

die() {
  echo "scg-entrypoint: $*" >&2
  exit 1
}

case "${1:-}" in
  --version | --config | --check-config) exec "$bin" "$@" ;;
esac

[ -r "$template" ] || die "cannot read the config template $template (set SCG_CONFIG_TEMPLATE)"
: "${SCG_NODE_NAME:=$(uname -n)}"
export SCG_NODE_NAME

nl='
'
script=""
# Placeholder names hold no spaces, so word splitting is what we want.
# shellcheck disable=SC2013,SC2016
for name in $(grep -o '\${SCG_[A-Z0-9_]*}' "$template" | sed 's/^\${\(.*\)}$/\1/' | sort -u); do
  # $name matches SCG_[A-Z0-9_]*, so the eval below only reads a variable.
  raw=""
  eval "raw=\${$name:-}"
  value=$(printf '%s' "$raw")  # $(...) drops trailing newlines
  [ -n "$value" ] || die "the template uses \${$name} but $name is not set"
  case "$value" in *"$nl"*) die "$name contains a newline" ;; esac
  # YAML single-quoted scalar: ' doubles. sed replacement: \ & and | escape.
  value=$(printf '%s' "$value" | sed -e "s/'/''/g" -e 's/[\\&|]/\\&/g')
  script="${script}s|\${$name}|$value|g;"
done

umask 077
mkdir -p "$(dirname "$out")"
if [ -n "$script" ]; then
  sed -e "$script" "$template" > "$out.tmp"
else
  cat "$template" > "$out.tmp"
fi
mv "$out.tmp" "$out"
unset SCG_CLUSTER_IDENTITY

if [ "${1:-}" = "--check" ]; then
  exec "$bin" --check-config "$out"
fi
exec "$bin" --config "$out" "$@"
