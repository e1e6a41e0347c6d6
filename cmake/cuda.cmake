# CUDA is optional: when nvcc is found, every source under a src/**/cuda/ folder (.cu and .cpp) joins the core
# library and LS_HAVE_CUDA is defined; without it those folders are not built and CUDA tests skip.
include(CheckLanguage)
set(LS_HAVE_CUDA OFF)
if(LS_CUDA)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_USER_MAKE_RULES_OVERRIDE_CUDA ${CMAKE_CURRENT_LIST_DIR}/cuda20_rules.cmake)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # Hopper first (sm_90a for wgmma), plus a portable sm_80 path. A GPU-only build may pass just the first.
    set(CMAKE_CUDA_ARCHITECTURES OFF)
    set(LS_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a;-gencode=arch=compute_80,code=sm_80" CACHE STRING
        "nvcc -gencode flags")
    set(LS_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "lanespark: CUDA backend ${LS_HAVE_CUDA}")

# Sources that exist only with CUDA: every file under a cuda/ folder of src/.
file(GLOB_RECURSE LS_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/src/*/cuda/*.cpp ${CMAKE_SOURCE_DIR}/src/*/*/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/*/*/cuda/*.cpp)

function(ls_attach_cuda target)
  if(NOT LS_HAVE_CUDA)
    return()
  endif()
  target_sources(${target} PRIVATE ${LS_CUDA_SOURCES})
  target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:${LS_CUDA_GENCODE} --expt-relaxed-constexpr -Xcompiler=-Wall>)
  target_link_libraries(${target} PUBLIC CUDA::cudart_static CUDA::cublas)
  target_compile_definitions(${target} PUBLIC LS_HAVE_CUDA=1)
endfunction()
