# CUDA is optional: when nvcc is found, every source under a src/**/cuda/ folder (.cu and .cpp) joins the core
# library and LS_HAVE_CUDA is defined; without it those folders are not built and CUDA tests skip.
include(CheckLanguage)

# ls_cuda_gencode(ARCHS OUT): nvcc -gencode flags for a list of LS_CUDA_ARCHS entries (a bad entry stops configure).
function(ls_cuda_gencode archs out)
  set(flags)
  foreach(arch IN LISTS archs)
    if(arch MATCHES "^([0-9]+)-ptx$")
      list(APPEND flags "-gencode=arch=compute_${CMAKE_MATCH_1},code=compute_${CMAKE_MATCH_1}")
    elseif(arch MATCHES "^[0-9]+a$")
      list(APPEND flags "-gencode=arch=compute_${arch},code=sm_${arch}")
    elseif(arch MATCHES "^[0-9]+$")
      list(APPEND flags "-gencode=arch=compute_${arch},code=sm_${arch}"
                        "-gencode=arch=compute_${arch},code=compute_${arch}")
    else()
      message(FATAL_ERROR "LS_CUDA_ARCHS: '${arch}' is not NN, NNa or NN-ptx (e.g. 90a;80 or 80-ptx)")
    endif()
  endforeach()
  if(NOT flags)
    message(FATAL_ERROR "LS_CUDA_ARCHS is empty")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
set(LS_HAVE_CUDA OFF)
if(LS_CUDA)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_USER_MAKE_RULES_OVERRIDE_CUDA ${CMAKE_CURRENT_LIST_DIR}/cuda20_rules.cmake)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # Hopper first (sm_90a for wgmma, TMA, clusters, programmatic launch), plus the portable sm_80+ path (mma.sync,
    # ldmatrix, cp.async): LS_CUDA_ARCHS lists what the fatbinary carries. "90a": sm_90a code; "80" (any NN): sm_NN
    # code and compute_NN PTX (the driver compiles it for newer GPUs); "80-ptx": compute_80 PTX only, which the
    # driver JIT-compiles on an H200, so every kernel takes its sm_80 path there (the portable path's test run).
    # Which features a run may use is decided at run time (src/compute/cuda/features.h).
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    set(LS_CUDA_ARCHS "90a;80" CACHE STRING "CUDA targets: 90a, 80, 86, 89, 80-ptx, ... (';'-separated)")
    ls_cuda_gencode("${LS_CUDA_ARCHS}" LS_CUDA_GENCODE)
    set(LS_HAVE_CUDA ON)
  endif()
endif()
if(LS_HAVE_CUDA)
  message(STATUS "lanespark: CUDA backend ON, LS_CUDA_ARCHS ${LS_CUDA_ARCHS}: ${LS_CUDA_GENCODE}")
else()
  message(STATUS "lanespark: CUDA backend OFF")
endif()

# Sources that exist only with CUDA: every file under a cuda/ folder of src/.
file(GLOB_RECURSE LS_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/src/*/cuda/*.cpp ${CMAKE_SOURCE_DIR}/src/*/*/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/*/*/cuda/*.cpp)

function(ls_attach_cuda target)
  if(NOT LS_HAVE_CUDA)
    return()
  endif()
  target_sources(${target} PRIVATE ${LS_CUDA_SOURCES})
  # features.cu reports what the binary carries (built_cuda_archs()); ';' would split the definition.
  string(REPLACE ";" "," archs_built "${LS_CUDA_ARCHS}")
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/compute/cuda/features.cu PROPERTIES
                              COMPILE_DEFINITIONS "LS_CUDA_ARCHS_BUILT=\"${archs_built}\"")
  target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:${LS_CUDA_GENCODE} --expt-relaxed-constexpr -Xcompiler=-Wall>)
  target_link_libraries(${target} PUBLIC CUDA::cudart_static CUDA::cublas)
  target_compile_definitions(${target} PUBLIC LS_HAVE_CUDA=1)
endfunction()
