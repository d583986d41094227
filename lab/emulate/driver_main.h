/* The command line and verdicts a module emulator's driver shares with the others (decode_emulator,
 * store_emulator): the module gives its problems (how many, each in words) and its check of one variant on
 * one problem; this runs the variants or the planted bugs over them.
 *   TOOL [--problem N] [NAME...]   the variants named, or all of them: PASS, SKIP or FAIL a problem, in order,
 *                                  up to a variant's first failure; a variant that runs none fails
 *   TOOL --mutants [NAME...]       every planted bug must fail with its expected message on a problem its
 *                                  variant passes (CAUGHT), else MISSED; a planted bug that names a schedule
 *                                  runs, and its variant is judged, under that schedule
 *   TOOL --schedule SEED ...       the threads run in the order of priorities drawn from SEED (set_schedule,
 *                                  emulator.h) instead of the round robin
 *   TOOL --list                    the variants and mutants built in
 * The exit status is 0 when every variant passed or every mutant was caught. */
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "emulator.h"

namespace emu {

struct driver {
    const char *tool;
    size_t problems;
    /* true for PASS, or a SKIP when why starts with "skip:" (the variant declines the problem, as it does on
     * a GPU); false for FAIL, the first line of why saying what failed */
    std::function<bool(size_t problem, const variant &v, std::string &why)> check;
    std::function<std::string(size_t problem)> describe;
};

inline const variant *find_variant(const std::string &name)
{
    for (const variant &v : variants())
        if (v.name == name) return &v;
    return nullptr;
}

/* The index of the first problem v fails (its reason in why), or -1; a line per problem run. */
inline int run_problems(const driver &d, const variant &v, const std::vector<size_t> &which, std::string &why)
{
    int ran = 0;
    for (size_t i : which) {
        const bool pass = d.check(i, v, why);
        const char *verdict = !pass ? "FAIL" : why.rfind("skip:", 0) == 0 ? "SKIP" : "PASS";
        ran += pass && verdict[0] == 'P';
        printf("%s %s %s: %s\n", verdict, v.name.c_str(), d.describe(i).c_str(), why.c_str());
        fflush(stdout);
        if (!pass) return (int)i;
    }
    if (ran == 0 && v.mutant_of.empty() && which.size() == d.problems) {
        printf("FAIL %s: declined every problem\n", v.name.c_str());
        return (int)which.size();
    }
    return -1;
}

inline int driver_usage(const driver &d, const char *why)
{
    fprintf(stderr,
            "%s: %s\nusage: %s [--schedule SEED] [--problem N] [NAME...]\n       %s [--schedule SEED] --mutants "
            "[NAME...]\n       %s --list\n",
            d.tool, why, d.tool, d.tool, d.tool);
    return 2;
}

inline int driver_main(const driver &d, int argc, char **argv)
{
    bool mutants = false, list = false;
    unsigned long long schedule = 0;
    std::vector<size_t> which;
    std::vector<const variant *> chosen;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--mutants") mutants = true;
        else if (a == "--list") list = true;
        else if (a == "--problem" && i + 1 < argc) which.push_back((size_t)atoi(argv[++i]));
        else if (a == "--schedule" && i + 1 < argc) {
            if (!parse_schedule(argv[++i], schedule)) return driver_usage(d, "--schedule: not a whole number");
        }
        else if (a[0] == '-') return driver_usage(d, ("unknown option " + a).c_str());
        else if (const variant *v = find_variant(a)) chosen.push_back(v);
        else return driver_usage(d, ("no variant or mutant named " + a).c_str());
    }
    if (list) {
        for (const variant &v : variants()) printf("%s\n", v.name.c_str());
        return 0;
    }
    for (size_t i : which)
        if (i >= d.problems) return driver_usage(d, "--problem: no such problem");
    if (which.empty())
        for (size_t i = 0; i < d.problems; i++) which.push_back(i);
    if (chosen.empty())
        for (const variant &v : variants())
            if (v.mutant_of.empty() != mutants) chosen.push_back(&v);
    int good = 0, bad = 0;
    for (const variant *v : chosen) {
        std::string why;
        set_schedule(schedule_of(*v, schedule)); /* the mutant's variant is judged under it too */
        const int at = run_problems(d, *v, which, why);
        if (v->mutant_of.empty()) {
            (at < 0 ? good : bad)++;
            continue;
        }
        /* A mutant: caught when it fails with its message on a problem its variant passes. */
        std::string base_why;
        const bool base_passes =
            at >= 0 && (size_t)at < d.problems && d.check((size_t)at, *find_variant(v->mutant_of), base_why);
        const bool caught = at >= 0 && base_passes && why.find(v->expect) != std::string::npos;
        const std::string said = at < 0           ? "passed every problem"
                                 : !base_passes ? v->mutant_of + " itself fails there: " + base_why
                                                : why;
        printf("%s %s (%s): %s\n", caught ? "CAUGHT" : "MISSED", v->name.c_str(), v->mutant_of.c_str(), said.c_str());
        (caught ? good : bad)++;
    }
    printf(mutants ? "%d mutants caught, %d missed\n" : "%d variants passed, %d failed\n", good, bad);
    return bad != 0;
}

} // namespace emu
