# Sourced by the launch scripts.
#
# hq VALUE prints VALUE as one quoted Hydra override value: a path with spaces, parentheses, commas,
# '=', brackets, quotes or backslashes stays one value (Hydra reads an unquoted one as its grammar:
# "run (copy)" or "a,b" would not parse, or parse as something else).
#
# no_interpolation NAME... stops the launcher (exit 2) when one of these variables holds '${': veRL
# resolves its whole config (OmegaConf.resolve) before reading it, which turns any escaped '${' back
# into an interpolation, so no quoting keeps such a path as written.
#
# require NAME WHAT stops the launcher (exit 2, one line) when NAME is unset or empty, saying WHAT to
# set it to; count NAME stops it when NAME, set and not empty, is not a whole number of at least 1 (a GPU or
# node count: veRL would otherwise fail on it after Ray has started).

require() {
  if [[ -z ${!1-} ]]; then
    echo "$(basename "$0"): set $1 to $2" >&2
    exit 2
  fi
}

count() {
  local name
  for name in "$@"; do
    if [[ -n ${!name-} && ! ${!name} =~ ^[1-9][0-9]{0,5}$ ]]; then
      echo "$(basename "$0"): $name=${!name} is not a whole number of at least 1" >&2
      exit 2
    fi
  done
}

no_interpolation() {
  local name
  for name in "$@"; do
    if [[ ${!name-} == *'${'* ]]; then
      echo "$(basename "$0"): $name=${!name} holds '\${', which veRL's config reads as an interpolation; rename the folder or point a link without it there" >&2
      exit 2
    fi
  done
}

hq() {
  local LC_ALL=C  # byte by byte: every character looked for is ASCII, and a path need not be UTF-8
  local v=$1 out="" pre run tail=""
  # Hydra: \' is a quote inside a quoted value, and the backslashes just before one are doubled
  while [[ $v == *"'"* ]]; do
    pre=${v%%"'"*}
    run=${pre##*[!\\]}
    out+=${pre%"$run"}$run$run\\\'
    v=${v#*"'"}
  done
  v=$out$v
  while [[ $v == *\\ ]]; do v=${v%\\}; tail+='\\'; done  # a trailing backslash would escape the closing quote
  printf "'%s%s'" "$v" "$tail"
}
