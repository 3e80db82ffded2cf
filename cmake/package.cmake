# What `cmake --install` puts where, and the Debian package made from it
# (`make deb`: CPack's DEB generator over the same install rules, so the
# package holds exactly what an install from source does). docs/install.md
# says what goes where and why.
include(GNUInstallDirs)

# The binary finds its probe specs at bin/../share/eacgm/specs
# (src/probe/spec.cpp) and the SQLite extension is one module, not a library
# other programs link: both in eacgm's own directories.
set(EACGM_DATADIR ${CMAKE_INSTALL_DATADIR}/eacgm)
set(EACGM_LIBDIR lib/eacgm)
install(TARGETS eacgm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS eacgm_sql LIBRARY DESTINATION ${EACGM_LIBDIR})
install(DIRECTORY specs/ DESTINATION ${EACGM_DATADIR}/specs FILES_MATCHING PATTERN "*.json")
install(FILES dashboards/eacgm.json DESTINATION ${EACGM_DATADIR}/dashboards)
install(DIRECTORY dashboards/provisioning/ DESTINATION ${EACGM_DATADIR}/dashboards/provisioning)
install(FILES dist/prometheus/eacgm-alerts.yml dist/prometheus/eacgm-alerts.test.yml
        DESTINATION ${EACGM_DATADIR}/prometheus)

# The unit names the binary by its installed path, known only when
# installing (CPack installs under /usr whatever the build's prefix), so it is
# configured then. /lib/systemd/system, not /usr/lib: bookworm's packages ship
# units there (lintian's systemd-service-file-outside-lib).
install(CODE "set(EACGM_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  configure_file(\"${CMAKE_SOURCE_DIR}/dist/systemd/eacgm.service.in\"
                 \"${CMAKE_BINARY_DIR}/dist/eacgm.service\" @ONLY)")
install(FILES ${CMAKE_BINARY_DIR}/dist/eacgm.service DESTINATION /lib/systemd/system)
# The default configuration: every key commented out at its default.
install(FILES dist/eacgm.toml DESTINATION /etc/eacgm)

# The manual page, eacgm(1), made from the built binary's --help texts
# (scripts/man.py, help2man). A cross-built binary cannot run here: its
# package goes without one.
if(NOT CMAKE_CROSSCOMPILING)
  find_program(EACGM_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH REQUIRED)
  find_program(HELP2MAN help2man REQUIRED)
  set(man ${CMAKE_BINARY_DIR}/dist/eacgm.1)
  add_custom_command(OUTPUT ${man}.gz
    COMMAND ${EACGM_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/man.py $<TARGET_FILE:eacgm> ${man}
    COMMAND gzip -9nf ${man}
    DEPENDS eacgm ${CMAKE_SOURCE_DIR}/scripts/man.py ${CMAKE_SOURCE_DIR}/scripts/cli_help.py
    COMMENT "eacgm.1 from --help (help2man)")
  add_custom_target(man_page ALL DEPENDS ${man}.gz)
  install(FILES ${man}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()

# Debian's documentation files: the copyright and a changelog (gzip -9n, as
# policy 12.7 asks), named for a native package since the version has no
# Debian revision.
set(EACGM_DOCDIR ${CMAKE_INSTALL_DATADIR}/doc/eacgm)
string(TIMESTAMP EACGM_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC) # SOURCE_DATE_EPOCH when set
configure_file(dist/deb/changelog.in ${CMAKE_BINARY_DIR}/dist/changelog @ONLY)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/dist/changelog.gz
  COMMAND gzip -9n -c ${CMAKE_BINARY_DIR}/dist/changelog > ${CMAKE_BINARY_DIR}/dist/changelog.gz
  DEPENDS ${CMAKE_BINARY_DIR}/dist/changelog)
add_custom_target(deb_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/dist/changelog.gz)
install(FILES dist/deb/copyright ${CMAKE_BINARY_DIR}/dist/changelog.gz DESTINATION ${EACGM_DOCDIR})

# --- The package. Its architecture is the target's (a cross build for arm64
# makes an arm64 package), not the build machine's dpkg says.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(EACGM_DEB_ARCH arm64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
  set(EACGM_DEB_ARCH amd64)
else()
  set(EACGM_DEB_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME eacgm)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "eacgm developers <eacgm@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "eBPF tracer and anomaly detector for machine-learning jobs")
set(CPACK_PACKAGE_DESCRIPTION
  "eacgm watches machine-learning jobs from the outside, with eBPF, without a\n"
  "change to their code: CUDA runtime calls, NCCL and gloo collectives, PyTorch\n"
  "operators, Python functions, GPU state through NVML and the host around the\n"
  "job, merged into one timeline and kept in an embedded store. It exports to\n"
  "Prometheus, Perfetto and ClickHouse, and a Gaussian mixture model flags\n"
  "anomalous calls and names their root cause.\n"
  "\n"
  "This package holds the eacgm command, its probe specs, the node agent's\n"
  "systemd unit (not enabled) and default configuration, the Grafana dashboard\n"
  "and the Prometheus alert rules.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_PACKAGE_FILE_NAME eacgm_${PROJECT_VERSION}_${EACGM_DEB_ARCH})
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${EACGM_DEB_ARCH})
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE https://github.com/eacgm/eacgm)
# The shared libraries' packages, from the binaries' needs (dpkg-shlibdeps).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_SOURCE_DIR}/dist/deb/conffiles ${CMAKE_SOURCE_DIR}/dist/deb/postinst
  ${CMAKE_SOURCE_DIR}/dist/deb/prerm ${CMAKE_SOURCE_DIR}/dist/deb/postrm)
include(CPack)
