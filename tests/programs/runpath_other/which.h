// A header of the same name in an -I folder: a quoted include of the program's must not find it.
#pragma once
#define WHICH 2
