# CMake 3.25 does not know nvcc's C++20 flag ("requires the language dialect CUDA20"); nvcc 12+ takes -std=c++20.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
