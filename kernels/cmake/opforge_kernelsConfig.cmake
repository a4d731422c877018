# find_package(opforge_kernels CONFIG): the kernel library for the framework adapters.
#   opforge::opforge_kernels      the shared library (C ABI, opforge/opforge.h)
#   OPFORGE_OPS_TABLE             the op table (ops.yaml) the library was built from
#   opforge_generate(...)         adapter code generated from that table (OpforgeCodegen.cmake)
#   opforge_bundle_kernels(dest)  installs the library into `dest`, beside the module loading it
include("${CMAKE_CURRENT_LIST_DIR}/opforge_kernelsTargets.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/OpforgeCodegen.cmake")
get_filename_component(_opforge_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(OPFORGE_OPS_TABLE "${_opforge_prefix}/share/opforge/ops.yaml")

function(opforge_bundle_kernels destination)
  get_target_property(_lib opforge::opforge_kernels IMPORTED_LOCATION_RELEASE)
  if(NOT _lib)
    get_target_property(_lib opforge::opforge_kernels LOCATION)
  endif()
  get_target_property(_soname opforge::opforge_kernels IMPORTED_SONAME_RELEASE)
  install(FILES "${_lib}" DESTINATION "${destination}" RENAME "${_soname}")
endfunction()
