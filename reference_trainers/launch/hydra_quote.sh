# Sourced by the launch scripts. hq VALUE prints VALUE as one quoted Hydra override value that veRL's
# config holds as VALUE: a path with spaces, parentheses, commas, '=', brackets or quotes stays one
# value (Hydra reads an unquoted one as its grammar: "run (copy)" or "a,b" would not parse, or parse
# as something else), and a '${' in it stays text (OmegaConf would read ${...} as an interpolation).

# REPLY=$1 with a backslash before each $2 and the backslashes just before it doubled (in both
# grammars a backslash escapes what follows it there, and one before the escape is itself escaped)
_hq_escape() {
  local v=$1 m=$2 out="" pre run
  while [[ $v == *"$m"* ]]; do
    pre=${v%%"$m"*}
    run=${pre##*[!\\]}
    out+=${pre%"$run"}$run$run\\$m
    v=${v#*"$m"}
  done
  REPLY=$out$v
}

hq() {
  local v tail=""
  _hq_escape "$1" '${'     # OmegaConf, which reads the value Hydra gives it: \${ is a literal ${
  _hq_escape "$REPLY" "'"  # Hydra: \' is a quote inside a quoted value
  v=$REPLY
  while [[ $v == *\\ ]]; do v=${v%\\}; tail+='\\'; done  # a trailing backslash would escape the closing quote
  printf "'%s%s'" "$v" "$tail"
}
