#!/bin/sh
# Installs the built tree into a temporary prefix, then builds and runs programs
# against it: through pkg-config (shared and --static) and through CMake's find_package(nabla).
set -eu
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(find "$prefix" -name nabla.pc -exec dirname {} \; | head -n 1)
export PKG_CONFIG_PATH="$libdir"
# A consumer of the IDX reader, which needs zlib: linking it statically shows the
# package files carry that dependency. It reads a one-element IDX file.
printf '\000\000\010\001\000\000\000\001\052' > "$prefix/one.idx"
cat > "$prefix/reader.c" <<C
#include <nabla.h>
int main(void) {
  nb_ctx *c = nb_eager_new();
  nb_tensor *x = nb_idx_read(c, "$prefix/one.idx");
  int ok = x && nb_item(x, 0) == 42;
  nb_ctx_free(c);
  return !ok;
}
C
# shared library through pkg-config
rpath="-Wl,-rpath,$prefix/lib -Wl,-rpath,$(dirname "$libdir")"
cc -o "$prefix/gradients_pc" "$src/examples/gradients.c" $(pkg-config --cflags --libs nabla) $rpath
"$prefix/gradients_pc" >/dev/null
cc -o "$prefix/reader_pc" "$prefix/reader.c" $(pkg-config --cflags --libs nabla) $rpath
"$prefix/reader_pc"
# static library through pkg-config --static (its Libs.private and Requires.private)
static_libs=$(pkg-config --static --libs nabla | sed 's/-lnabla\b/-l:libnabla.a/')
cc -o "$prefix/reader_pc_static" "$prefix/reader.c" $(pkg-config --cflags nabla) $static_libs
"$prefix/reader_pc_static"
# CMake package
mkdir -p "$prefix/consumer"
cat > "$prefix/consumer/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(nabla 0.1 REQUIRED)
add_executable(gradients_cmake $src/examples/gradients.c)
target_link_libraries(gradients_cmake nabla::nabla)
add_executable(gradients_static $src/examples/gradients.c)
target_link_libraries(gradients_static nabla::nabla_static)
add_executable(reader_static $prefix/reader.c)
target_link_libraries(reader_static nabla::nabla_static)
CM
cmake -S "$prefix/consumer" -B "$prefix/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer/build" >/dev/null
"$prefix/consumer/build/gradients_cmake" >/dev/null
"$prefix/consumer/build/gradients_static" >/dev/null
"$prefix/consumer/build/reader_static"
# the `nabla` command, installed beside the library, finds it
"$prefix/bin/nabla" info --build | grep -q "^nabla "
echo "install check: pkg-config and find_package(nabla) consumers built and ran, bin/nabla ran"
