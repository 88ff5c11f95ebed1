#pragma once
// The live status page: the files of admin/ui/, compiled into the binary by
// cmake/embed_files.cmake, so a replica serves its page with no files on disk.

#include <cstddef>
#include <string_view>

namespace scg::admin {

/// One file of admin/ui/.
struct ui_file {
  std::string_view name;  ///< file name: "index.html", "app.js", …
  std::string_view body;
};

/// The file called `name`, nullptr when there is none.
const ui_file* find_ui_file(std::string_view name);

/// The Content-Type for a file called `name`, by its extension.
std::string_view ui_content_type(std::string_view name);

/// Every embedded file; defined in the generated ui_files.cpp.
extern const ui_file ui_files[];
extern const std::size_t ui_file_count;

}  // namespace scg::admin
