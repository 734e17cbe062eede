"""fa_cli/measure/c_macros.py: the macros a source tests with the preprocessor, comments and
strings left out, its quoted includes followed."""
from fa_cli.measure import c_macros

OWN = '''// BR and BC replaced by -D flags
#include <cstdio>
#include "tiles.h"
// #ifndef COMMENTED
/* #ifdef BLOCKED
#ifndef ALSO_BLOCKED */
#ifndef BR
#define BR 16  // rows
#endif
#  ifdef \\
  CONTINUED
#endif
#if defined(WITH_X) && defined WITH_Y
#elif defined ( WITH_Z ) || OTHER
#endif
const char* s = "// #ifndef IN_A_STRING";
'''


def test_the_macros_a_source_tests_comments_left_out(tmp_path):
    (tmp_path / "tiles.h").write_text("#ifndef BC\n#define BC 32\n#endif\n#define UNTESTED 1\n")
    (tmp_path / "hw4.cu").write_text(OWN)
    macros = c_macros.tested_macros(tmp_path / "hw4.cu")
    assert macros.tested == {"BR", "BC", "CONTINUED", "WITH_X", "WITH_Y", "WITH_Z"}
    assert macros.defaults == {"BR": "16", "BC": "32"}
    assert c_macros.strip_comments('a // b\nc /* d\ne */ f "g // h"') == 'a  \nc  \n f "g // h"'
