#!/bin/sh
# Checks that every relative markdown link in ROOT/README.md and ROOT/docs/*.md names a
# file or directory that exists, relative to the page that holds it. Web links
# (scheme:...) and links within a page (#...) are not checked; "page.md#anchor" checks
# page.md only. Prints each broken link as FILE: TARGET and exits 1 when there is one.
#   check_links.sh ROOT          check a tree (CTest: docs_links)
#   check_links.sh --self-test   show that the check passes a good tree and fails a broken
#                                link (CTest: docs_links_selftest)
set -eu

# The link targets of markdown file $1, one a line: the (...) after each "](".
link_targets() {
  grep -o '](\([^)]*\))' "$1" | sed 's/^](\(.*\))$/\1/' || true
}

# Prints the broken links of markdown file $1; returns 1 when there is one.
check_page() {
  page=$1
  dir=$(dirname "$page")
  status=0
  set -f # link targets are words, never file patterns
  for target in $(link_targets "$page"); do
    case $target in
      \#*) continue ;;
      [a-zA-Z]*:*) continue ;;
    esac
    path=${target%%#*}
    if [ ! -e "$dir/$path" ]; then
      echo "$page: broken link: $target" >&2
      status=1
    fi
  done
  set +f
  return $status
}

check_tree() {
  root=$1
  status=0
  for page in "$root/README.md" "$root"/docs/*.md; do
    [ -f "$page" ] || continue
    check_page "$page" || status=1
  done
  return $status
}

self_test() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_links.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/docs"
  printf '# t\n[a page](docs/a.md) [web](https://example.org/x) [here](#t)\n' > "$tmp/README.md"
  printf '[back](../README.md#t) [a folder](../docs/)\n' > "$tmp/docs/a.md"
  if ! check_tree "$tmp"; then
    echo "self-test: a tree with good links failed" >&2
    return 1
  fi
  printf '[gone](missing.md#x)\n' >> "$tmp/docs/a.md"
  if check_tree "$tmp" 2>/dev/null; then
    echo "self-test: a broken link passed" >&2
    return 1
  fi
  echo "self-test: good links pass, a broken link fails"
}

case ${1:-} in
  --self-test) self_test ;;
  "") echo "usage: $0 ROOT | --self-test" >&2; exit 2 ;;
  *) check_tree "$1" ;;
esac
