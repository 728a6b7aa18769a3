# `cmake --install BUILD [--prefix DIR]`: the two programs, the CUDA device module beside them
# (where memtwin looks for it), and the backend-neutral core as a library other projects link:
#   find_package(memtwin) -> memtwin::models      (CMake; lib/cmake/memtwin)
#   pkg-config memtwin                            (lib/pkgconfig/memtwin.pc)
# with its headers under include/memtwin (#include "models/scenario_loader.h"). The simulator and
# the hardware backend are reached through the programs, not linked.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(memtwin_models PROPERTIES EXPORT_NAME models)
set_target_properties(memtwin_warnings PROPERTIES EXPORT_NAME warnings)
install(TARGETS memtwin memtwin-device RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET memtwin_cuda)
  install(TARGETS memtwin_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(TARGETS memtwin_models memtwin_warnings EXPORT memtwinTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memtwin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/memtwin/models
        FILES_MATCHING PATTERN "*.h")

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/memtwin)
install(EXPORT memtwinTargets NAMESPACE memtwin:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/memtwinConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/memtwinConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memtwinConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memtwinConfig.cmake ${PROJECT_BINARY_DIR}/memtwinConfigVersion.cmake DESTINATION ${config_dir})

configure_file(${PROJECT_SOURCE_DIR}/cmake/memtwin.pc.in ${PROJECT_BINARY_DIR}/memtwin.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memtwin.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
