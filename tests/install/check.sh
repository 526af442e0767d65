#!/bin/sh
# Installs the built tree into a temporary prefix, then builds and runs a program
# against it twice: through pkg-config and through CMake's find_package(nabla).
set -eu
build=$1
src=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(find "$prefix" -name nabla.pc -exec dirname {} \; | head -n 1)
export PKG_CONFIG_PATH="$libdir"
# shared library through pkg-config
cc -o "$prefix/demo_pc" "$src/examples/demo.c" $(pkg-config --cflags --libs nabla) -Wl,-rpath,"$prefix/lib" -Wl,-rpath,"$(dirname "$libdir")"
"$prefix/demo_pc" >/dev/null
# CMake package
mkdir -p "$prefix/consumer"
cat > "$prefix/consumer/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(nabla 0.1 REQUIRED)
add_executable(demo_cmake $src/examples/demo.c)
target_link_libraries(demo_cmake nabla::nabla)
add_executable(demo_static $src/examples/demo.c)
target_link_libraries(demo_static nabla::nabla_static)
CM
cmake -S "$prefix/consumer" -B "$prefix/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer/build" >/dev/null
"$prefix/consumer/build/demo_cmake" >/dev/null
"$prefix/consumer/build/demo_static" >/dev/null
echo "install check: pkg-config and find_package(nabla) consumers built and ran"
