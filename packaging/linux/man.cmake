# Generates a man page from a program's --help with help2man (cmake -P):
#   -DHELP2MAN=... -DEXE=path -DNAME=kvscope-cli -DDESCRIPTION="..." -DOUT=kvscope-cli.1.gz
#   [-DSUBCOMMANDS="audit;generate"]  each subcommand's --help becomes a SUBCOMMANDS section
# The program runs under its plain name (a symlink on PATH), so the usage lines name
# `kvscope-cli`, not the build path; Qt programs run with the offscreen platform.
get_filename_component(work "${OUT}.d" ABSOLUTE)
file(REMOVE_RECURSE "${work}")
file(MAKE_DIRECTORY "${work}/bin")
file(CREATE_LINK "${EXE}" "${work}/bin/${NAME}" SYMBOLIC)
set(ENV{PATH} "${work}/bin:$ENV{PATH}")
set(ENV{QT_QPA_PLATFORM} offscreen)
set(ENV{XDG_RUNTIME_DIR} "${work}")
set(include "${work}/include.h2m")
file(WRITE "${include}" "[SEE ALSO]\nkvscope(1), kvscope-cli(1), kvtrace --help, docs in /usr/share/doc/kvscope\n")
if(SUBCOMMANDS)
  file(APPEND "${include}" "[SUBCOMMANDS]\n")
  foreach(sub IN LISTS SUBCOMMANDS)
    execute_process(COMMAND ${NAME} ${sub} --help OUTPUT_VARIABLE text RESULT_VARIABLE rc ERROR_QUIET)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${NAME} ${sub} --help failed (${rc})")
    endif()
    string(REPLACE "\\" "\\e" text "${text}")
    string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" text "\n${text}")
    file(APPEND "${include}" ".SS ${sub}\n.nf${text}.fi\n")
  endforeach()
endif()
execute_process(COMMAND "${HELP2MAN}" --no-info --version-string=${VERSION} "--name=${DESCRIPTION}"
                        --section=1 --include=${include} --output=${work}/${NAME}.1 ${NAME}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man ${NAME} failed (${rc})")
endif()
execute_process(COMMAND gzip -9n -c ${work}/${NAME}.1 OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${OUT} failed")
endif()
file(REMOVE_RECURSE "${work}")
