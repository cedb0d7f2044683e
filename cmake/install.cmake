# Installation: `cmake --install build [--prefix P]` or `make install PREFIX=P`.
#   bin/spotwave                      the command
#   lib/libspotwave.so.MAJOR[.MINOR.PATCH], libspotwave.so, libspotwave.a
#   include/spotwave/*.h              the public API
#   share/spotwave/ocular/            data files (found at run time: SPOTWAVE_DATA_DIR, else
#                                     ../share/spotwave beside the library, else this prefix's)
#   lib/pkgconfig/spotwave.pc         pkg-config (shared by default, --static for the archive)
#   lib/cmake/spotwave/               find_package(spotwave): spotwave::spotwave (shared) and
#                                     spotwave::spotwave_static
#   share/man/man1/spotwave*.1        man pages (when help2man was found)
include(CMakePackageConfigHelpers)

install(TARGETS spotwave_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS spotwave_shared spotwave EXPORT spotwaveTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
                NAMELINK_COMPONENT development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/spotwave
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development
        FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/data/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/spotwave COMPONENT runtime)

# ---------------------------------------------------------------- CMake package
set(SW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/spotwave)
install(EXPORT spotwaveTargets NAMESPACE spotwave:: DESTINATION ${SW_CMAKE_DIR}
        COMPONENT development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/spotwaveConfig.cmake.in
  ${PROJECT_BINARY_DIR}/spotwaveConfig.cmake INSTALL_DESTINATION ${SW_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/spotwaveConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/spotwaveConfig.cmake
              ${PROJECT_BINARY_DIR}/spotwaveConfigVersion.cmake
        DESTINATION ${SW_CMAKE_DIR} COMPONENT development)

# ---------------------------------------------------------------- pkg-config
# Libs: the shared library alone (its dependencies are its own); Libs.private: what a static
# link (`pkg-config --static`) needs besides libspotwave.a.
set(SW_PC_PRIVATE "")
foreach(lib ${CFITSIO_LIBRARY} ${HDF5_LIBRARY} ${LZ4_LIBRARY} ${CBF_LIBRARY} ${TIFF_LIBRARY} ${PNG_LIBRARIES}
            ${FFTW_LIBRARY} ${LAPACKE_LIBRARY}
            ${OPENBLAS_LIBRARY})
  string(APPEND SW_PC_PRIVATE " ${lib}")
endforeach()
if(OpenMP_C_FOUND)
  string(APPEND SW_PC_PRIVATE " ${OpenMP_C_FLAGS}")
endif()
if(SW_HAVE_CUDA)
  string(APPEND SW_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcufft -lcublas -lcusolver"
                              " -lcudart_static -lstdc++ -ldl -lrt -lpthread")
endif()
if(SW_HAVE_NCCL)
  string(APPEND SW_PC_PRIVATE " ${NCCL_LIBRARY}")
endif()
string(APPEND SW_PC_PRIVATE " -lpthread -lm")
set(SW_PC_CFLAGS "-I\${includedir}")
if(RANDOM123_INCLUDE_DIR AND NOT RANDOM123_INCLUDE_DIR STREQUAL "/usr/include")
  string(APPEND SW_PC_CFLAGS " -I${RANDOM123_INCLUDE_DIR}")  # rng.h includes Random123/philox.h
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/spotwave.pc.in ${PROJECT_BINARY_DIR}/spotwave.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/spotwave.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)

# ---------------------------------------------------------------- Debian package (cpack -G DEB)
set(CPACK_PACKAGE_NAME spotwave)
set(CPACK_PACKAGE_VENDOR "the spotwave developers")
set(CPACK_PACKAGE_CONTACT "spotwave developers <spotwave@invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "point-source (spot) images on GPUs and CPUs: simulation, spot finding, Shack-Hartmann centroids, aberrometry, wavefront reconstruction")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)  # xz takes minutes over the debug information
include(CPack)
