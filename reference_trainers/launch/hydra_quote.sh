# Sourced by the launch scripts. hq VALUE prints VALUE as one quoted Hydra override value, so a path
# with spaces, parentheses, commas, '=', brackets or quotes stays one value (Hydra reads an unquoted
# one as its grammar: "run (copy)" or "a,b" would not parse, or parse as something else).
hq() {
  local v=${1//\'/\\\'} tail=""
  while [[ $v == *\\ ]]; do v=${v%\\}; tail+='\\'; done  # a trailing backslash would escape the closing quote
  printf "'%s%s'" "$v" "$tail"
}
