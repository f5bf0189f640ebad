# cmake -DIN=file -DOUT=file.cpp -DNAME=symbol -P embed_text.cmake
# Writes IN as a char array kforge::pipeline::detail::NAME_data plus NAME_size. Bytes rather than a
# raw string literal, so no content of IN can end the literal early.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," body "${hex}")
file(WRITE ${OUT} "// Generated from ${IN}; do not edit.\n#include <cstddef>\n"
  "namespace kforge::pipeline::detail {\n"
  "extern const char ${NAME}_data[] = {${body}'\\0'};\n"
  "extern const std::size_t ${NAME}_size = ${size};\n}\n")
