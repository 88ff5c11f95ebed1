# Writes OUT, a C++ file that defines scg::net::ui_files (admin/status_page.hpp)
# with every file of DIR as a string literal. Run with cmake -P at build time.
# Every byte becomes a \xNN escape: binary-safe, and no escape can swallow the
# character after it, since the next one starts with a backslash too.
file(GLOB files RELATIVE ${DIR} ${DIR}/*)
list(SORT files)
set(entries "")
foreach(name IN LISTS files)
  file(READ ${DIR}/${name} hex HEX)
  string(LENGTH "${hex}" hex_len)
  math(EXPR size "${hex_len} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" escaped "${hex}")
  string(APPEND entries "    {\"${name}\", std::string_view(\"${escaped}\", ${size})},\n")
endforeach()
list(LENGTH files count)
file(WRITE ${OUT}.tmp
  "// Generated from ${DIR} by cmake/embed_files.cmake; do not edit.\n"
  "#include \"admin/status_page.hpp\"\n\n"
  "namespace scg::admin {\n\n"
  "const ui_file ui_files[] = {\n${entries}};\n"
  "const std::size_t ui_file_count = ${count};\n\n"
  "}  // namespace scg::admin\n")
# Only touch OUT when it changed, so an unchanged page does not relink.
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
