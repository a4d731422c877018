# Provides OPFORGE_DLPACK_INCLUDE (holding dlpack/dlpack.h) and OPFORGE_DLPACK_LICENSE.
#
# The header is an external input, so it comes from a pinned, checksum-verified archive:
# `opforge build` passes the cached path of the `dlpack-source` pin as OPFORGE_PIN_DLPACK_SOURCE.
# Setting OPFORGE_DLPACK_INCLUDE_DIR yourself (a directory containing dlpack/dlpack.h) skips that.
set(OPFORGE_DLPACK_INCLUDE_DIR "" CACHE PATH "Directory containing dlpack/dlpack.h")
set(OPFORGE_PIN_DLPACK_SOURCE "" CACHE FILEPATH "Pinned source archive that vendors DLPack")

if(OPFORGE_DLPACK_INCLUDE_DIR)
  if(NOT EXISTS "${OPFORGE_DLPACK_INCLUDE_DIR}/dlpack/dlpack.h")
    message(FATAL_ERROR
      "OPFORGE_DLPACK_INCLUDE_DIR=${OPFORGE_DLPACK_INCLUDE_DIR} has no dlpack/dlpack.h")
  endif()
  set(OPFORGE_DLPACK_INCLUDE "${OPFORGE_DLPACK_INCLUDE_DIR}")
  set(OPFORGE_DLPACK_LICENSE "${OPFORGE_DLPACK_INCLUDE_DIR}/../LICENSE")
elseif(OPFORGE_PIN_DLPACK_SOURCE)
  set(_dlpack_root "${CMAKE_BINARY_DIR}/_dlpack")
  file(REMOVE_RECURSE "${_dlpack_root}")
  file(ARCHIVE_EXTRACT INPUT "${OPFORGE_PIN_DLPACK_SOURCE}" DESTINATION "${_dlpack_root}"
    PATTERNS "*/3rdparty/dlpack/include/dlpack/dlpack.h" "*/3rdparty/dlpack/LICENSE")
  file(GLOB _dlpack_include "${_dlpack_root}/*/3rdparty/dlpack/include")
  if(NOT _dlpack_include)
    message(FATAL_ERROR
      "${OPFORGE_PIN_DLPACK_SOURCE} holds no 3rdparty/dlpack/include/dlpack/dlpack.h; "
      "check the dlpack-source pin in checksums.yaml")
  endif()
  # A plain variable, not a cache entry: a changed pin is re-extracted at the next configure.
  set(OPFORGE_DLPACK_INCLUDE "${_dlpack_include}")
  get_filename_component(OPFORGE_DLPACK_LICENSE "${_dlpack_include}/../LICENSE" ABSOLUTE)
else()
  message(FATAL_ERROR
    "DLPack header not found. Build through `opforge build` (it passes the pinned archive as "
    "OPFORGE_PIN_DLPACK_SOURCE), or set OPFORGE_DLPACK_INCLUDE_DIR to a directory containing "
    "dlpack/dlpack.h.")
endif()
