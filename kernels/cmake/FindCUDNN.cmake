# FindCUDNN: cuDNN wherever an image or a pip install puts it.
#
# Searched in this order (the first root holding both a header and a library wins):
#   1. CUDNN_ROOT (CMake variable or environment variable)
#   2. nvidia/cudnn inside the site-packages of Python3_EXECUTABLE (the nvidia-cudnn-cu* wheels)
#   3. the CUDA toolkit root (CUDAToolkit_LIBRARY_ROOT, /usr/local/cuda)
#   4. /usr, including the multiarch dirs include/x86_64-linux-gnu and lib/x86_64-linux-gnu
# Set CUDNN_SYSTEM_SEARCH=OFF to search CUDNN_ROOT only.
#
# Headers may be cudnn.h or only versioned ones (cudnn_v8.h, cudnn_ops_v9.h, ...): then a shim
# directory maps each unversioned name to its versioned file. The library may be libcudnn.so or
# only a versioned soname (libcudnn.so.9).
#
# Defines CUDNN_FOUND, CUDNN_INCLUDE_DIRS, CUDNN_LIBRARY, CUDNN_VERSION and CUDNN::cudnn.

option(CUDNN_SYSTEM_SEARCH "Search beyond CUDNN_ROOT for cuDNN" ON)

set(_cudnn_roots "")
if(CUDNN_ROOT)
  list(APPEND _cudnn_roots "${CUDNN_ROOT}")
elseif(DEFINED ENV{CUDNN_ROOT})
  list(APPEND _cudnn_roots "$ENV{CUDNN_ROOT}")
endif()

if(CUDNN_SYSTEM_SEARCH)
  if(Python3_EXECUTABLE)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
        "import site, sysconfig; p = sysconfig.get_paths(); print(';'.join(dict.fromkeys([p['purelib'], p['platlib'], *site.getsitepackages()])))"
      OUTPUT_VARIABLE _cudnn_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    foreach(_dir IN LISTS _cudnn_site)
      list(APPEND _cudnn_roots "${_dir}/nvidia/cudnn")
    endforeach()
  endif()
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND _cudnn_roots "${CUDAToolkit_LIBRARY_ROOT}")
  endif()
  list(APPEND _cudnn_roots /usr/local/cuda /usr)
endif()
list(REMOVE_DUPLICATES _cudnn_roots)

set(_cudnn_include_suffixes include include/x86_64-linux-gnu include/aarch64-linux-gnu)
set(_cudnn_lib_suffixes lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)
set(_cudnn_searched "")
unset(CUDNN_HEADER)
unset(CUDNN_LIBRARY)

foreach(_root IN LISTS _cudnn_roots)
  set(_header "")
  foreach(_suffix IN LISTS _cudnn_include_suffixes)
    set(_dir "${_root}/${_suffix}")
    list(APPEND _cudnn_searched "${_dir}")
    if(EXISTS "${_dir}/cudnn.h")
      set(_header "${_dir}/cudnn.h")
    else()
      file(GLOB _versioned "${_dir}/cudnn_v[0-9]*.h")
      if(_versioned)
        list(SORT _versioned ORDER DESCENDING)
        list(GET _versioned 0 _header)
      endif()
    endif()
    if(_header)
      break()
    endif()
  endforeach()
  set(_library "")
  foreach(_suffix IN LISTS _cudnn_lib_suffixes)
    set(_dir "${_root}/${_suffix}")
    list(APPEND _cudnn_searched "${_dir}")
    if(EXISTS "${_dir}/libcudnn.so")
      set(_library "${_dir}/libcudnn.so")
    else()
      file(GLOB _sonames "${_dir}/libcudnn.so.[0-9]*")
      if(_sonames)
        # The shortest name is the soname (libcudnn.so.9), preferred over libcudnn.so.9.x.y.
        list(SORT _sonames)
        list(GET _sonames 0 _library)
      endif()
    endif()
    if(_library)
      break()
    endif()
  endforeach()
  if(_header AND _library)
    set(CUDNN_HEADER "${_header}")
    set(CUDNN_LIBRARY "${_library}")
    break()
  endif()
endforeach()

if(CUDNN_HEADER)
  get_filename_component(_cudnn_header_dir "${CUDNN_HEADER}" DIRECTORY)
  set(CUDNN_INCLUDE_DIRS "${_cudnn_header_dir}")
  get_filename_component(_cudnn_header_name "${CUDNN_HEADER}" NAME)
  if(NOT _cudnn_header_name STREQUAL "cudnn.h")
    # Only versioned headers: give each an unversioned name that includes the real file.
    set(_shim "${CMAKE_BINARY_DIR}/cudnn_shim")
    file(REMOVE_RECURSE "${_shim}")
    file(GLOB _versioned "${_cudnn_header_dir}/cudnn*_v[0-9]*.h")
    foreach(_file IN LISTS _versioned)
      get_filename_component(_name "${_file}" NAME)
      string(REGEX REPLACE "_v[0-9]+\\.h$" ".h" _plain "${_name}")
      if(NOT EXISTS "${_cudnn_header_dir}/${_plain}")
        file(WRITE "${_shim}/${_plain}" "#include \"${_file}\"\n")
      endif()
    endforeach()
    list(PREPEND CUDNN_INCLUDE_DIRS "${_shim}")
  endif()
  set(CUDNN_VERSION "")
  file(GLOB _version_headers "${_cudnn_header_dir}/cudnn_version.h" "${_cudnn_header_dir}/cudnn_version_v*.h")
  list(APPEND _version_headers "${CUDNN_HEADER}")
  foreach(_file IN LISTS _version_headers)
    file(STRINGS "${_file}" _defines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
    if(_defines)
      string(REGEX REPLACE ".*CUDNN_MAJOR +([0-9]+).*" "\\1" _major "${_defines}")
      string(REGEX REPLACE ".*CUDNN_MINOR +([0-9]+).*" "\\1" _minor "${_defines}")
      string(REGEX REPLACE ".*CUDNN_PATCHLEVEL +([0-9]+).*" "\\1" _patch "${_defines}")
      set(CUDNN_VERSION "${_major}.${_minor}.${_patch}")
      break()
    endif()
  endforeach()
endif()

include(FindPackageHandleStandardArgs)
list(REMOVE_DUPLICATES _cudnn_searched)
string(REPLACE ";" "\n    " _cudnn_searched_text "${_cudnn_searched}")
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_HEADER
  VERSION_VAR CUDNN_VERSION
  REASON_FAILURE_MESSAGE
    "looked for cudnn.h or cudnn_v*.h and libcudnn.so or libcudnn.so.<N> in:\n    ${_cudnn_searched_text}\nSet CUDNN_ROOT to the directory that holds cuDNN's include/ and lib/ (or lib64/), or configure with -DOPFORGE_WITH_CUDNN=OFF.")

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIRS}")
endif()
