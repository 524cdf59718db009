# metalserve_include_root(<target> <PUBLIC|PRIVATE|INTERFACE> [<folder>])
#
# Declares <folder> (default: the calling CMakeLists.txt's folder) as the
# include folder of <target>. The code spells includes from the source root
# ("server/metrics/metrics.h"), so a plain target_include_directories of the
# source root would let every target include every header. Instead each
# folder gets a root of its own under build/include/ that holds one link,
# <root>/<folder> -> the source folder: a target sees another module's
# headers only by linking that module, and an include without its link is a
# compile error ("No such file"), not a silent dependency.
function(metalserve_include_root target scope)
  if(ARGC GREATER 2)
    get_filename_component(folder "${ARGV2}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  else()
    set(folder ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${folder})
  string(REPLACE "/" "_" key "${rel}")
  set(root ${PROJECT_BINARY_DIR}/include/${key})
  set(link ${root}/${rel})
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} points_to)
    if(NOT points_to STREQUAL folder)  # a tree configured from another checkout
      file(REMOVE ${link})
    endif()
  endif()
  if(NOT EXISTS ${link})
    get_filename_component(parent ${link} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${folder} ${link} SYMBOLIC)
  endif()
  target_include_directories(${target} ${scope} ${root})
endfunction()
