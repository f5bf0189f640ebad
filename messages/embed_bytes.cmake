# cmake -DIN=file -DOUT=file.cpp -P embed_bytes.cmake: writes IN as a C++ byte array.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
math(EXPR size "${n} / 2")
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\n#include <cstddef>\n#include <cstdint>\n"
  "namespace kforge::messages::detail {\nextern const std::uint8_t schema_bfbs[] = {${body}};\n"
  "extern const std::size_t schema_bfbs_size = ${size};\n}\n")
