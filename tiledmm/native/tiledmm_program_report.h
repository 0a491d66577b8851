// tiledmm_program_report.h: the report file of a whole program that tm.run runs, on both
// backends (emu/program_runtime.h on the emulator, tiledmm_program_cuda.h on the GPU): one JSON
// line per launch and per fault, written to the file descriptor tiledmm hands the program and
// read by tiledmm/programs/run.py after the run.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

namespace tm_prog {

// `s` appended to `out` as a JSON string: quoted, with quotes, backslashes and control
// characters escaped (a kernel's name or a file name is the program's own text).
inline void json_str(std::string &out, const char *s)
{
    out += '"';
    for (; s && *s; ++s) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out += '\\';
            out += (char)c;
        } else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else
            out += (char)c;
    }
    out += '"';
}

// One line to the report file `fd`; nothing when there is none (fd < 0, a program run by hand).
// A write that fails drops the rest of the line: the run's other records still arrive.
inline void write_report_line(int fd, const std::string &line)
{
    if (fd < 0) return;
    std::string l = line + "\n";
    const char *p = l.data();
    size_t n = l.size();
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

}  // namespace tm_prog
