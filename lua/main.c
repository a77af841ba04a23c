/* main.c — the venom executable: a LuaJIT interpreter with venom preloaded.
 *
 *   venom script.lua [args...]   run a script (global `arg` as in luajit)
 *   venom -e 'code'              run a string
 *   venom                        a REPL: line editing and history (libedit),
 *                                results printed, multi-line input, Tab
 *                                completion, ?name for help, errors shown
 *                                without leaving, Ctrl-C stops a line.
 *
 * The state is prepared by the Lua bridge (vn_lua_setup, lua/host.c): the
 * venom.core C module is registered in package.preload and the Lua half of
 * venom is found through package.path (the installed modules next to the
 * library, or the source tree's lua/ directory in a build tree). */
#include "binding.h"
#include "venom_lua.h"

#include <lauxlib.h>
#include <lualib.h>
#include <luajit.h>

#include <editline/readline.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

static lua_State *g_L; /* for the SIGINT hook and Tab completion */

static void usage(FILE *f)
{
    fputs("usage: venom [options] [script.lua [args...]]\n"
          "  script.lua  run a script: arg[0] is its name, arg[1], ... its arguments\n"
          "  -           run a script read from stdin\n"
          "  -e code     run code (with venom, nn, optim and help as globals)\n"
          "  -i          open the REPL after the script or code\n"
          "  -v          print the version\n"
          "  -h, --help  print this help\n"
          "  --          stop reading options\n"
          "With no script and no -e, venom opens a REPL: results are printed, Tab\n"
          "completes names (venom.ze<Tab>, x:res<Tab>), help(f) or ?name shows the\n"
          "documentation (help() an overview), history is kept in ~/.venom_history\n"
          "(or $VENOM_HISTORY), Ctrl-C drops the input being typed or stops the\n"
          "line running (a second Ctrl-C ends venom), Ctrl-D exits. In a script,\n"
          "Ctrl-C ends venom with status 130.\n",
          f);
}

/* ---- running code ------------------------------------------------------------ */

/* Ctrl-C while Lua runs. SIGINT sets a count hook (as lua.c and luajit.c do) that raises an
 * "interrupted" error at the next instruction the interpreter runs. Two
 * things never reach the hook: a C call runs to its end first (a big matmul
 * finishes), and a loop that LuaJIT compiled to machine code never returns
 * to the interpreter (`while true do end` in a script). So the REPL runs
 * the lines typed at it in the interpreter (repl() turns the JIT off for
 * them); a script, which Ctrl-C must end, is ended by a timer one second
 * later if the error has not unwound it by then; and a second Ctrl-C ends
 * the process at once (one that came before the hook ran: the hook
 * re-arms Ctrl-C, so a REPL line whose pcall caught the error can be
 * interrupted again). Exit status 130 (128 + SIGINT), as a shell reports
 * for a process that SIGINT killed. When venom starts with SIGINT ignored
 * (`nohup`, `venom ... &` from a script) it stays ignored. */
static volatile sig_atomic_t g_interrupted; /* a SIGINT came during the current docall */
static volatile sig_atomic_t g_pending;     /* ... and the hook has not run yet */
static bool g_sigint_ignored;                /* SIGINT was ignored when venom started */
static bool g_interrupt_exits;               /* running a script or -e: an interrupt ends venom */

enum { EXIT_INTERRUPTED = 130 };

/* The last resort, async-signal-safe: one line on stderr, then _exit. */
static void exit_interrupted(int sig)
{
    (void)sig;
    static const char msg[] = "venom: interrupted\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(EXIT_INTERRUPTED);
}

/* The hook: stop here with an error that says where, at the innermost
 * Lua line (inside a hook, level 0 is the function that was running; the
 * hook also fires on a call into C, which has no line). */
static void interrupted(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    g_pending = 0;
    lua_Debug d;
    for (int level = 0; lua_getstack(L, level, &d); level++) {
        if (lua_getinfo(L, "Sl", &d) && d.currentline > 0) {
            lua_pushfstring(L, "%s:%d: interrupted", d.short_src, d.currentline);
            lua_error(L);
        }
    }
    lua_pushliteral(L, "interrupted");
    lua_error(L);
}

static void on_sigint(int sig)
{
    if (g_pending) exit_interrupted(sig);
    g_pending = g_interrupted = 1;
    lua_sethook(g_L, interrupted, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    if (g_interrupt_exits) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = exit_interrupted;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGALRM, &sa, NULL);
        alarm(1);
    }
}

/* Message handler: the error text plus a stack traceback (none for an
 * interrupt: where the code stood is in the message, and a traceback would
 * bury it). */
static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    /* x > 0 on a tensor: Lua compares a number with a userdata without
     * asking the tensor's metatable, so the hint that x > y gets from the
     * binding's __lt has to be added here. */
    if (strstr(msg, "attempt to compare number with userdata") ||
        strstr(msg, "attempt to compare userdata with number"))
        msg = lua_pushfstring(L, "%s (a tensor and a number? comparisons are methods: x:gt(0), "
                                 "x:ge(0), x:lt(0), x:le(0) give an elementwise u8 mask)", msg);
    if (g_interrupted) lua_pushstring(L, msg);
    else luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Call the function below narg arguments with a traceback handler and
 * Ctrl-C caught; g_interrupted says afterwards whether Ctrl-C came. */
static int docall(lua_State *L, int narg, int nres)
{
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    struct sigaction sa, outside;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    g_interrupted = g_pending = 0;
    if (!g_sigint_ignored) sigaction(SIGINT, &sa, &outside);
    int rc = lua_pcall(L, narg, nres, base);
    if (!g_sigint_ignored) sigaction(SIGINT, &outside, NULL);
    alarm(0);                   /* the call has ended: no need to end it by force */
    lua_sethook(L, NULL, 0, 0); /* a Ctrl-C that came as the call ended */
    lua_remove(L, base);
    return rc;
}

/* Print the error on top of the stack (if rc says there is one). */
static int report(lua_State *L, int rc, const char *prefix)
{
    if (rc != 0) {
        const char *msg = lua_tostring(L, -1);
        fflush(stdout);
        fprintf(stderr, "%s%s\n", prefix, msg ? msg : "(error object is not a string)");
        fflush(stderr);
        lua_pop(L, 1);
    }
    return rc;
}

static int run_string(lua_State *L, const char *code, const char *name)
{
    int rc = luaL_loadbuffer(L, code, strlen(code), name);
    if (rc == 0) rc = docall(L, 0, 0);
    return report(L, rc, "venom: ");
}

/* Run argv[script] with the arguments after it as `...`. */
static int run_script(lua_State *L, char **argv, int argc, int script)
{
    const char *path = argv[script];
    int rc = luaL_loadfile(L, strcmp(path, "-") == 0 ? NULL : path);
    if (rc == 0) {
        int n = argc - script - 1;
        luaL_checkstack(L, n + 3, "too many arguments to the script");
        for (int i = script + 1; i < argc; i++) lua_pushstring(L, argv[i]);
        rc = docall(L, n, 0);
    }
    return report(L, rc, "venom: ");
}

/* The global `arg`: arg[0] the script, arg[1..] its arguments, arg[-1] and
 * below the interpreter and options (as luajit does). Without a script
 * (script == 0), arg[0] is the interpreter. */
static void set_arg(lua_State *L, char **argv, int argc, int script)
{
    lua_createtable(L, argc - script, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* Globals for interactive use: venom, nn, optim, help (each only if it
 * loads). */
static void set_globals(lua_State *L)
{
    static const char code[] =
        "local ok, venom = pcall(require, 'venom')\n"
        "if not ok then error(venom, 0) end\n"
        "_G.venom = venom\n"
        "for _, name in ipairs { 'nn', 'optim', 'help' } do\n"
        "  local ok2, m = pcall(function() return venom[name] end)\n"
        "  if ok2 then _G[name] = m\n"
        "  else io.stderr:write('venom: venom.', name, ' is not available: ', tostring(m), '\\n') end\n"
        "end\n";
    run_string(L, code, "=(venom globals)");
}

/* A script gets `help` alone as a global (it requires what else it uses).
 * Quietly absent if venom does not load: the script's own require says why. */
static void set_script_globals(lua_State *L)
{
    static const char code[] =
        "local ok, help = pcall(require, 'venom.help')\n"
        "if ok then _G.help = help end\n";
    if (luaL_loadbuffer(L, code, sizeof code - 1, "=(venom globals)") != 0 || lua_pcall(L, 0, 0, 0) != 0)
        lua_pop(L, 1);
}

/* ---- the REPL ------------------------------------------------------------------- */

static int g_show = LUA_NOREF;     /* venom.repl.show, or a plain fallback */
static int g_complete = LUA_NOREF; /* venom.repl.complete, if it loaded */
static int g_help = LUA_NOREF;     /* venom.repl.help_command, if it loaded */

static void load_repl_helpers(lua_State *L)
{
    static const char fallback[] =
        "return function(...)\n"
        "  local t = {}\n"
        "  for i = 1, select('#', ...) do t[i] = tostring((select(i, ...))) end\n"
        "  return table.concat(t, '\\t')\n"
        "end\n";
    lua_getglobal(L, "require");
    lua_pushliteral(L, "venom.repl");
    if (lua_pcall(L, 1, 1, 0) == 0 && lua_istable(L, -1)) {
        lua_getfield(L, -1, "complete");
        g_complete = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_getfield(L, -1, "help_command");
        g_help = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_getfield(L, -1, "show");
        g_show = luaL_ref(L, LUA_REGISTRYINDEX);
        lua_pop(L, 1);
        return;
    }
    fprintf(stderr, "venom: venom.repl did not load (%s); plain printing, no completion\n",
            lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
    lua_pop(L, 1);
    luaL_loadbuffer(L, fallback, sizeof fallback - 1, "=(repl fallback)");
    lua_call(L, 0, 1);
    g_show = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Matches for the word being completed, handed one by one to libedit
 * (which frees them). */
static char **g_matches;
static int g_nmatches, g_next;

static char *complete_next(const char *text, int state)
{
    if (state == 0) {
        while (g_next < g_nmatches) free(g_matches[g_next++]);
        g_nmatches = g_next = 0;
        lua_State *L = g_L;
        int top = lua_gettop(L);
        lua_rawgeti(L, LUA_REGISTRYINDEX, g_complete);
        lua_pushstring(L, text);
        if (lua_isfunction(L, -2) && lua_pcall(L, 1, 1, 0) == 0 && lua_istable(L, -1)) {
            int n = (int)lua_objlen(L, -1);
            char **m = realloc(g_matches, sizeof *m * (size_t)(n ? n : 1));
            if (m) {
                g_matches = m;
                for (int i = 1; i <= n; i++) {
                    lua_rawgeti(L, -1, i);
                    const char *s = lua_tostring(L, -1);
                    if (s && (m[g_nmatches] = strdup(s))) g_nmatches++;
                    lua_pop(L, 1);
                }
            }
        }
        lua_settop(L, top);
    }
    return g_next < g_nmatches ? g_matches[g_next++] : NULL;
}

static char **complete(const char *text, int start, int end)
{
    (void)start;
    (void)end;
    rl_attempted_completion_over = 1; /* no file-name completion */
    return rl_completion_matches(text, complete_next);
}

/* ---- Ctrl-C at the prompt ---------------------------------------------------------
 *
 * On a terminal, Ctrl-C while a line is being typed discards the input so
 * far (a `>>` continuation included) and shows a fresh prompt, as Python's
 * REPL does. The SIGINT handler sets a flag and writes a byte to a pipe;
 * libedit reads keys through prompt_getc, which waits on the terminal and
 * that pipe together and gives up when the byte comes, so readline() returns
 * NULL and the REPL tells the interrupt from end of input by the flag. A
 * pipe rather than an interrupted read(): the kernel hands the signal to any
 * thread that does not block it, often an OpenBLAS worker, and then the main
 * thread's read() is not interrupted at all. */
static volatile sig_atomic_t g_prompt_interrupted;
static int g_sigpipe[2] = {-1, -1}; /* read end, write end; both non-blocking */

static void on_sigint_at_prompt(int sig)
{
    (void)sig;
    int saved = errno;
    g_prompt_interrupted = 1;
    ssize_t w = write(g_sigpipe[1], "", 1); /* if the pipe is full, a wake-up is pending anyway */
    (void)w;
    errno = saved;
}

/* Sets up the pipe and the handler (for the whole REPL session: docall
 * swaps in on_sigint while Lua runs and puts this one back). Not when
 * SIGINT is ignored. */
static bool catch_sigint_at_prompt(void)
{
    if (g_sigint_ignored || pipe(g_sigpipe) != 0) return false;
    for (int k = 0; k < 2; k++) {
        fcntl(g_sigpipe[k], F_SETFL, fcntl(g_sigpipe[k], F_GETFL) | O_NONBLOCK);
        fcntl(g_sigpipe[k], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint_at_prompt;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGINT, &sa, NULL) == 0;
}

/* One key for libedit as a wide character (libedit's readline layer takes
 * rl_getc_function's int as one wchar_t), decoded with mbrtowc in the
 * locale set by repl(); an invalid byte sequence is dropped, as libedit's
 * reader does. -1 at end of input or on Ctrl-C. */
static int prompt_getc(FILE *f)
{
    (void)f;
    char buf[MB_LEN_MAX];
    size_t n = 0;
    for (;;) {
        if (g_prompt_interrupted) return -1;
        struct pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {g_sigpipe[0], POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) return -1;
        if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue; /* a signal */
        ssize_t r = read(STDIN_FILENO, buf + n, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        n++;
        wchar_t wc;
        mbstate_t st;
        memset(&st, 0, sizeof st);
        size_t k = mbrtowc(&wc, buf, n, &st);
        if (k == (size_t)-2 && n < sizeof buf) continue; /* a multibyte character goes on */
        if (k == (size_t)-1 || k == (size_t)-2) {
            n = 0;
            continue;
        }
        return (int)wc;
    }
}

/* libedit decodes and displays UTF-8 only in a UTF-8 locale, and drops
 * other non-ASCII input. Take the user's LC_CTYPE, or C.UTF-8 when that is
 * the plain C locale (often so in containers and under tmux). */
static void set_input_locale(void)
{
    const char *loc = setlocale(LC_CTYPE, "");
    if (!loc || strcmp(loc, "C") == 0 || strcmp(loc, "POSIX") == 0) setlocale(LC_CTYPE, "C.UTF-8");
}

/* One line without its newline (malloc'd), or NULL at end of input or on
 * Ctrl-C (g_prompt_interrupted). On a terminal through libedit with a
 * prompt; from a pipe plainly, no prompt. */
static char *read_line(bool tty, const char *prompt)
{
    if (tty) {
        char junk[64]; /* a Ctrl-C that came while the last line ran */
        while (read(g_sigpipe[0], junk, sizeof junk) > 0) {}
        g_prompt_interrupted = 0;
        return readline(prompt);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
    return line;
}

/* Whether a syntax error only means the chunk is unfinished (it ends with
 * "near '<eof>'"): then the REPL reads another line. */
static bool incomplete(lua_State *L, int rc)
{
    static const char eof[] = "'<eof>'";
    size_t n, k = sizeof eof - 1;
    const char *msg = lua_tolstring(L, -1, &n);
    return rc == LUA_ERRSYNTAX && msg && n >= k && strcmp(msg + n - k, eof) == 0;
}

/* Compile a chunk: as an expression list to print if that parses, else as
 * statements. The expressions go through select(1, ...) so that a call among
 * them is not a tail call, which would hide the line from its errors. */
static int load_chunk(lua_State *L, const char *chunk, size_t n)
{
    lua_pushliteral(L, "return select(1, ");
    lua_pushlstring(L, chunk, n);
    lua_pushliteral(L, ")");
    lua_concat(L, 3);
    size_t len;
    const char *ret = lua_tolstring(L, -1, &len);
    int rc = luaL_loadbuffer(L, ret, len, "=stdin");
    lua_remove(L, -2);
    if (rc == 0) return 0;
    lua_pop(L, 1);
    return luaL_loadbuffer(L, chunk, n, "=stdin");
}

/* `?name` at the prompt: print venom.repl.help_command(name). */
static void help_line(lua_State *L, const char *name)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, g_help);
    if (!lua_isfunction(L, -1)) {
        lua_pop(L, 1);
        fputs("venom: ?name needs venom.repl, which did not load\n", stderr);
        return;
    }
    lua_pushstring(L, name);
    if (report(L, docall(L, 1, 1), "") == 0) {
        puts(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
        lua_pop(L, 1);
    }
}

/* Print the values above `base` (a line's results) through g_show. */
static void print_results(lua_State *L, int base)
{
    int n = lua_gettop(L) - base;
    if (n == 0) return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, g_show);
    lua_insert(L, base + 1);
    if (report(L, docall(L, n, 1), "") == 0) {
        puts(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
        lua_pop(L, 1);
    }
}

static void repl(lua_State *L)
{
    bool tty = isatty(0);
    char history[4096] = "";
    load_repl_helpers(L);
    if (tty) {
        const char *env = getenv("VENOM_HISTORY"), *home = getenv("HOME");
        if (env) snprintf(history, sizeof history, "%s", env);
        else if (home) snprintf(history, sizeof history, "%s/.venom_history", home);
        rl_readline_name = "venom";
        rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{}()[],+-*/%^~#";
        rl_attempted_completion_function = complete;
        rl_completion_append_character = '\0';
        /* (set before using_history(), which sets libedit up) */
        if (catch_sigint_at_prompt()) rl_getc_function = prompt_getc;
        set_input_locale();
        using_history();
        stifle_history(1000);
        if (history[0]) read_history(history);
        printf("venom %s (%s) - globals: venom, nn, optim, help. help() or ?name for help;\n"
               "Tab completes; Ctrl-C stops a line; Ctrl-D exits.\n",
               VENOM_VERSION, LUAJIT_VERSION);
    }

    char *chunk = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        char *line = read_line(tty, len ? ">> " : "> ");
        if (!line && g_prompt_interrupted) {
            fputs("^C\n", stdout); /* the input so far is dropped */
            len = 0;
            continue;
        }
        if (!line) break;
        if (tty && line[0]) {
            add_history(line);
            if (history[0]) write_history(history);
        }
        if (len == 0 && line[0] == '?') {
            help_line(L, line + 1);
            free(line);
            fflush(stdout);
            continue;
        }
        /* "=expr" prints expr, as in the Lua 5.1 REPL. */
        const char *text = len == 0 && line[0] == '=' ? line + 1 : line;
        size_t need = len + strlen(text) + 2;
        if (need > cap) {
            char *grown = realloc(chunk, need * 2);
            if (!grown) {
                free(line);
                fputs("venom: out of memory reading input\n", stderr);
                break;
            }
            chunk = grown;
            cap = need * 2;
        }
        len += (size_t)sprintf(chunk + len, "%s\n", text);
        free(line);

        int base = lua_gettop(L);
        int rc = load_chunk(L, chunk, len);
        if (incomplete(L, rc)) {
            lua_pop(L, 1);
            continue;
        }
        len = 0;
        if (rc == 0) {
            /* Interpreted, so that Ctrl-C can stop the line (see on_sigint);
             * the functions it calls from modules are still compiled. */
            luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
            rc = docall(L, 0, LUA_MULTRET);
            if (rc == 0) print_results(L, base);
        }
        report(L, rc, "");
        lua_settop(L, base);
        fflush(stdout);
    }
    /* Piped input that ends inside an unfinished chunk ("print(1 +"): its
     * syntax error, rather than nothing at all (at a terminal, Ctrl-D at
     * the ">>" prompt just leaves). */
    if (!tty && len > 0) {
        int base = lua_gettop(L);
        report(L, load_chunk(L, chunk, len), "");
        lua_settop(L, base);
    }
    free(chunk);
    while (g_next < g_nmatches) free(g_matches[g_next++]);
    free(g_matches);
    if (tty) putchar('\n');
}

/* ---- main ------------------------------------------------------------------------ */

/* How OpenMP's idle thread waits between parallel regions. A training step
 * runs hundreds of them, with short serial stretches (Lua, small ops)
 * between. libgomp's threads spin GOMP_SPINCOUNT times (one `pause` each,
 * ~30 ns on Zen 4) before sleeping in the kernel:
 *  - OMP_WAIT_POLICY=passive (0 spins) makes every region wake a sleeping
 *    thread, which on a VM means waking a halted vCPU;
 *  - libgomp's default (300,000 spins, ~9 ms) was slower than that too;
 *  - 30,000 (~1 ms) was the fastest on the MLP epoch and on the GPT at both
 *    sizes, dense and 2:8 (bench/RESULTS.md, "How the executable's OpenMP
 *    threads wait").
 * (Passive was needed while OpenBLAS had threads of its own that the
 * spinning starved; it now runs single-threaded, engine/blas.c.) libgomp
 * reads the variables once, when it is loaded, so when the user has set
 * neither we set the count and re-execute ourselves before any work. (With
 * more threads than CPUs libgomp spins far less by itself.) */
static bool self_exe_is_us(void);

static void set_omp_wait(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || !self_exe_is_us()) return;
    setenv("GOMP_SPINCOUNT", "30000", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with libgomp's default */
}

/* Whether /proc/self/exe is the file this code was loaded from. It is not
 * when a loader or an emulator started us (`ld.so build/venom ...`,
 * valgrind): exec'ing it would then run that program without ours. So the
 * file mapped at this function's address must be /proc/self/exe's. */
static bool self_exe_is_us(void)
{
    struct stat exe, mapped;
    FILE *f = stat("/proc/self/exe", &exe) == 0 ? fopen("/proc/self/maps", "r") : NULL;
    if (!f) return false;
    uintptr_t here = (uintptr_t)&self_exe_is_us, lo, hi;
    char line[4096];
    bool same = false;
    while (fgets(line, sizeof line, f)) {
        int path_at = 0; /* "lo-hi perms offset dev inode   path" */
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %*s %*s %*s %n", &lo, &hi, &path_at) < 2 ||
            here < lo || here >= hi)
            continue;
        char *path = line + path_at;
        path[strcspn(path, "\n")] = '\0';
        same = path_at > 0 && path[0] == '/' && stat(path, &mapped) == 0 &&
               mapped.st_dev == exe.st_dev && mapped.st_ino == exe.st_ino;
        break;
    }
    fclose(f);
    return same;
}

int main(int argc, char **argv)
{
    set_omp_wait(argv);
    lua_State *L = luaL_newstate();
    if (!L) {
        fputs("venom: cannot create a Lua state (out of memory)\n", stderr);
        return 1;
    }
    g_L = L;
    struct sigaction at_start;
    g_sigint_ignored = sigaction(SIGINT, NULL, &at_start) == 0 && at_start.sa_handler == SIG_IGN;
    luaL_openlibs(L);
    if (vn_lua_setup(L) != VN_OK) {
        fprintf(stderr, "venom: %s\n", vn_last_error());
        lua_close(L);
        return 1;
    }

    /* Options up to the script name; -e chunks run in order afterwards. */
    const char *codes[64];
    int ncodes = 0, rc = 0, i;
    bool interactive = false;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            goto done;
        }
        if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
            printf("venom %s (%s)\n", VENOM_VERSION, LUAJIT_VERSION);
            goto done;
        }
        if (strcmp(a, "-i") == 0) {
            interactive = true;
        } else if (strcmp(a, "-e") == 0 && i + 1 < argc &&
                   ncodes < (int)(sizeof codes / sizeof codes[0])) {
            codes[ncodes++] = argv[++i];
        } else {
            const char *why = strcmp(a, "-e") != 0 ? "unknown option"
                              : i + 1 < argc     ? "too many -e options at"
                                                 : "missing code after";
            fprintf(stderr, "venom: %s '%s'\n", why, a);
            usage(stderr);
            rc = 1;
            goto done;
        }
    }
    int script = i < argc ? i : 0;
    set_arg(L, argv, argc, script);

    if (ncodes > 0 || (interactive || !script)) set_globals(L);
    else set_script_globals(L);
    g_interrupt_exits = true;
    for (int k = 0; k < ncodes && rc == 0 && !g_interrupted; k++)
        rc = run_string(L, codes[k], "=(command line)");
    if (rc == 0 && script && !g_interrupted) rc = run_script(L, argv, argc, script);
    g_interrupt_exits = false;
    /* A script that failed inside a distributed world of 2 or more: the
     * other ranks may wait forever in a collective it will not join, so
     * end the whole job (MPI_Abort; mpirun then stops every rank). The
     * error is already on stderr. */
    if (rc != 0 && !g_interrupted) vn_dist_abort(1);
    if (g_interrupted) {
        rc = EXIT_INTERRUPTED;
        goto done;
    }
    if (rc == 0 && (interactive || (!script && ncodes == 0))) repl(L);
    rc = rc ? 1 : 0;
done:
    lua_close(L);
    return rc;
}
