# opforge_generate(<out_var> <target> <op_table> <out_dir>): code generated from the op table by
# `python -m opforge.kernels <target>` (C ABI, PyTorch or MindSpore adapter), regenerated when the
# table or the generator changes. <out_var> receives the generated files. Needs Python3_EXECUTABLE
# to import opforge (`opforge build` passes its own interpreter).
function(opforge_generate out_var target table out_dir)
  if(NOT Python3_EXECUTABLE)
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
  endif()
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -m opforge.kernels sources
    OUTPUT_VARIABLE _sources OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_VARIABLE _error RESULT_VARIABLE _status)
  if(NOT _status EQUAL 0)
    message(FATAL_ERROR
      "${Python3_EXECUTABLE} cannot run the op-table generator (python -m opforge.kernels): "
      "${_error}\nBuild with `opforge build`, or pass -DPython3_EXECUTABLE=<a Python with opforge>")
  endif()
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -m opforge.kernels outputs ${target}
    OUTPUT_VARIABLE _outputs OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(TRANSFORM _outputs PREPEND "${out_dir}/")
  add_custom_command(
    OUTPUT ${_outputs}
    COMMAND "${Python3_EXECUTABLE}" -m opforge.kernels ${target} "${table}" "${out_dir}"
    DEPENDS "${table}" ${_sources}
    COMMENT "Generating ${target} code from ${table}"
    VERBATIM)
  set(${out_var} ${_outputs} PARENT_SCOPE)
endfunction()
