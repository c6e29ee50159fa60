/* The Slurm commands' compiled client: runs a command in the user's warm command server.
 *
 * A Python command pays the interpreter's start (~5 ms on a small machine) before its first
 * line runs. This client, installed as squeue, sbatch, ... (muster.cli.launchers), hands its
 * arguments, environment, working directory, umask, resource limits and its stdin, stdout and
 * stderr to a command server of the same user (muster.cli.cmdserver), where a process forked
 * from an interpreter that has already imported the commands runs it, and exits as that
 * process did. Whatever the server cannot take -- none yet, a different identity, closed
 * descriptors, MUSTER_CMD_SERVER=0 -- the client runs the command's Python launcher itself,
 * exactly as before: it starts a server for the next call and goes on.
 *
 * Trust: the server's socket lives in $XDG_RUNTIME_DIR/muster-cmd (the login session's own
 * directory, where systemd made one) or else /tmp/muster-cmd-UID, a directory that must
 * belong to the user and be closed to everyone else, and the client talks only to a server whose
 * peer credentials are its own user's. The server checks the client's the same way, and
 * that the client lives in its namespaces and root directory (the socket's name says
 * which: each place has its own server). Inside a job (SLURM_JOB_ID) the client always
 * runs the command itself.
 *
 * Built at install time with the paths it needs:
 *   cc -O2 -DMUSTER_LIBEXEC='"/venv/libexec/muster"' -DMUSTER_ID='"abc123"' client.c
 *
 * The protocol (muster.cli.cmdserver reads it): "MUS1", the body's length (4 bytes, native
 * order), then the body: NUL-terminated fields -- the command, the umask, the ignored
 * signals, the real uid:gid, the groups, the resource limits, the number of arguments, the
 * arguments, then the environment to the end. Replies: "P" and the pid of the runner the
 * server forked for the command, "F" (run it yourself: nothing ran; the server's answer
 * when it runs as many commands as it may, or the runner's, before or after "G", when it
 * refuses the command), "X" and a wait status. The runner starts the command only once the
 * client has answered "P" with "G" (go), which carries the descriptors 0, 1, 2 and the
 * working directory. A client that had no "P" within ANSWER milliseconds (a
 * stopped server, say) closes instead, runs the command itself and removes the socket, so
 * that the next command starts another server (the old one leaves when it sees that).
 * The command runs once, whichever side was slow, and none of the client's descriptors is
 * left behind.
 *
 * MUSTER_CMD_SERVER=wait: where no server runs, start one and wait for it rather than run
 * the command alone (muster up uses it to start the user's server). MUSTER_CMD_SERVER=0, or
 * the site's CommandServer=no in muster.conf: every command runs by itself.
 *
 * Job control: Ctrl-Z (SIGTSTP) stops the command (SIGSTOP) and then the client, so that
 * the shell sees its job stopped; fg (SIGCONT) continues both. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MUSTER_LIBEXEC
#error "MUSTER_LIBEXEC: the directory of the commands' Python launchers and the server's"
#endif
#ifndef MUSTER_ID
#error "MUSTER_ID: this install's name for its server's socket"
#endif

extern char **environ;

#define STARTING 10 /* seconds a server may take to start before another is tried */
#define ANSWER 2000 /* milliseconds a server's runner may take to take the command */

static volatile sig_atomic_t runner;  /* the pid running the command, once known */
static volatile sig_atomic_t pending; /* a signal that came before it was */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGALRM, SIGTSTP};

/* Ctrl-Z: the command is stopped, then the client, so that the shell sees its job stopped.
 * The command runs in the server's session, out of the terminal's reach: an orphaned
 * process group, where the kernel drops SIGTSTP, so it gets SIGSTOP. */
static void stop_both(void) {
    kill(runner, SIGSTOP);
    kill(getpid(), SIGSTOP);
}

static void forward(int sig) {
    if (runner > 0 && sig == SIGTSTP)
        stop_both();
    else if (runner > 0)
        kill(runner, sig);
    else
        pending = sig;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Run the command's Python launcher in this process: the way every command ran before. */
static void direct(const char *name, int argc, char **argv) {
    static char path[PATH_MAX];
    if (pending) {
        signal(pending, SIG_DFL);
        raise(pending);
    }
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++) {
        struct sigaction sa;
        if (sigaction(forwarded[i], NULL, &sa) == 0 && sa.sa_handler == forward)
            signal(forwarded[i], SIG_DFL);
    }
    snprintf(path, sizeof path, "%s/%s", MUSTER_LIBEXEC, name);
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (args) {
        args[0] = path;
        for (int i = 1; i < argc; i++)
            args[i] = argv[i];
        execv(path, args);
    }
    fprintf(stderr, "%s: error: cannot run %s: %s\n", name, path, strerror(errno));
    exit(127);
}

/* Where the process lives and how its interpreter would start: its namespaces and root
 * directory, and its PYTHON* variables, hashed (FNV-1a). A command must run where its client
 * runs (the network, the mounts, the host name it sees), from an interpreter started as its
 * own would be (PYTHONPATH, PYTHONWARNINGS, ...): each such place has its own server. */
static unsigned long long place(void) {
    static const char *const kinds[] = {"mnt", "net", "uts", "ipc", "pid", "user", "cgroup"};
    unsigned long long hash = 1469598103934665603ULL;
    struct stat st;
    char path[32];
    for (size_t i = 0; i <= sizeof kinds / sizeof *kinds; i++) {
        int found;
        if (i < sizeof kinds / sizeof *kinds) {
            snprintf(path, sizeof path, "/proc/self/ns/%s", kinds[i]);
            found = stat(path, &st) == 0;
        } else {
            found = stat("/", &st) == 0;
        }
        unsigned long long parts[2] = {found ? (unsigned long long)st.st_dev : 0, found ? (unsigned long long)st.st_ino : 0};
        for (size_t k = 0; k < sizeof parts; k++)
            hash = (hash ^ ((const unsigned char *)parts)[k]) * 1099511628211ULL;
    }
    unsigned long long python = 0; /* a sum of each variable's own hash: in any order */
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "PYTHON", 6) != 0)
            continue;
        unsigned long long one = 1469598103934665603ULL;
        for (const unsigned char *c = (const unsigned char *)*e; *c; c++)
            one = (one ^ *c) * 1099511628211ULL;
        python += one;
    }
    for (size_t k = 0; k < sizeof python; k++)
        hash = (hash ^ ((const unsigned char *)&python)[k]) * 1099511628211ULL;
    return hash;
}

/* The login session's runtime directory, when it is one: absolute, the user's own, closed. */
static const char *runtime_dir(uid_t uid) {
    const char *dir = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (!dir || dir[0] != '/' || strlen(dir) > 64)
        return NULL;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077))
        return NULL;
    return dir;
}

static int socket_path(char *out, size_t size) {
    char dir[96];
    uid_t uid = geteuid();
    struct stat st;
    const char *session = runtime_dir(uid);
    if (session)
        snprintf(dir, sizeof dir, "%s/muster-cmd", session);
    else
        snprintf(dir, sizeof dir, "/tmp/muster-cmd-%u", (unsigned)uid);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -1;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077))
        return -1; /* not the user's own, closed directory: never trust a socket in it */
    return snprintf(out, size, "%s/%s-%016llx.sock", dir, MUSTER_ID, place()) < (int)size ? 0 : -1;
}

/* The site's switch: CommandServer=no (off, false, 0) in muster.conf ($MUSTER_CONF, else
 * /etc/muster/muster.conf) makes every command run by itself, for every user. */
static int site_off(void) {
    const char *path = getenv("MUSTER_CONF");
    if (!path || !*path)
        path = getenv("SLURM_CONF_MUSTER");
    if (!path || !*path)
        path = "/etc/muster/muster.conf";
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char line[1024];
    int off = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (strncasecmp(p, "CommandServer", 13) != 0)
            continue;
        p += 13;
        p += strspn(p, " \t");
        if (*p != '=')
            continue;
        p += 1 + strspn(p + 1, " \t");
        size_t n = strcspn(p, " \t\r\n#");
        off = (n == 2 && strncasecmp(p, "no", 2) == 0) || (n == 3 && strncasecmp(p, "off", 3) == 0) ||
              (n == 5 && strncasecmp(p, "false", 5) == 0) || (n == 1 && p[0] == '0');
    }
    fclose(f);
    return off;
}

/* Start a server in the background for the next command: its own session, no terminal,
 * none of this process's descriptors (a caller reading our stdout to its end would wait). */
static void start_server(const char *sock) {
    /* One start at a time: the commands that find no server while one is starting (~0.1 s)
     * leave it to that one. A mark older than STARTING seconds is a start that failed. */
    char mark[PATH_MAX];
    struct stat st;
    snprintf(mark, sizeof mark, "%s.starting", sock);
    int fd = open(mark, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST && stat(mark, &st) == 0 && time(NULL) - st.st_mtime > STARTING) {
        unlink(mark);
        fd = open(mark, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    }
    if (fd < 0)
        return;
    close(fd);
    pid_t pid = fork();
    if (pid == 0) {
        static char server[PATH_MAX];
        setsid();
        if (fork() != 0)
            _exit(0);
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || chdir("/") != 0)
            _exit(1);
        dup2(null, 0), dup2(null, 1), dup2(null, 2);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        snprintf(server, sizeof server, "%s/cmdserver", MUSTER_LIBEXEC);
        execl(server, server, sock, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}

struct buf {
    char *data;
    size_t len, cap;
};

static int put(struct buf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = (b->cap + n) * 2;
        char *data = realloc(b->data, cap);
        if (!data)
            return -1;
        b->data = data, b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static int put_str(struct buf *b, const char *s) { return put(b, s, strlen(s) + 1); }

static int put_fmt(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put_fmt(struct buf *b, const char *fmt, ...) {
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= sizeof tmp ? -1 : put(b, tmp, (size_t)n + 1);
}

static int request(struct buf *b, const char *name, int argc, char **argv, unsigned ignored) {
    mode_t mask = umask(022);
    umask(mask);
    int ngroups = getgroups(0, NULL);
    gid_t *groups = malloc(sizeof *groups * (size_t)(ngroups > 0 ? ngroups : 1));
    char *list = malloc((size_t)(ngroups > 0 ? ngroups : 1) * 12 + 1);
    if (ngroups < 0 || !groups || !list || getgroups(ngroups, groups) != ngroups)
        return -1;
    size_t at = 0;
    list[0] = 0;
    for (int i = 0; i < ngroups; i++)
        at += (size_t)sprintf(list + at, i ? ",%u" : "%u", (unsigned)groups[i]);
    char limits[RLIM_NLIMITS * 48 + 1];
    limits[0] = 0;
    at = 0;
    for (int r = 0; r < RLIM_NLIMITS; r++) {
        struct rlimit rl;
        if (getrlimit(r, &rl) != 0)
            continue;
        at += (size_t)snprintf(limits + at, sizeof limits - at, "%s%d:%lld:%lld", at ? "," : "", r,
                               rl.rlim_cur == RLIM_INFINITY ? -1LL : (long long)rl.rlim_cur,
                               rl.rlim_max == RLIM_INFINITY ? -1LL : (long long)rl.rlim_max);
    }
    if (put(b, "MUS1\0\0\0\0", 8) || put_str(b, name) || put_fmt(b, "%o", (unsigned)mask) ||
        put_fmt(b, "%u", ignored) || put_fmt(b, "%u:%u", (unsigned)getuid(), (unsigned)getgid()) ||
        put_str(b, list) || put_str(b, limits) || put_fmt(b, "%d", argc))
        return -1;
    free(groups);
    free(list);
    for (int i = 0; i < argc; i++)
        if (put_str(b, argv[i]))
            return -1;
    for (char **e = environ; *e; e++)
        if (put_str(b, *e))
            return -1;
    uint32_t len = (uint32_t)(b->len - 8);
    memcpy(b->data + 4, &len, 4);
    return 0;
}

static int send_request(int sock, struct buf *b) {
    for (size_t done = 0; done < b->len;) {
        ssize_t n = send(sock, b->data + done, b->len - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* "G", with the descriptors the command takes: sent only to a runner that has answered, so
 * that none of them waits in the socket of a server that never does (a caller reading our
 * stdout to its end would wait with it). */
static int send_go(int sock) {
    int fds[4] = {0, 1, 2, open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)};
    if (fds[3] < 0)
        return -1;
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {"G", 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET, cmsg->cmsg_type = SCM_RIGHTS, cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent;
    while ((sent = sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    close(fds[3]);
    return sent == 1 ? 0 : -1;
}

static int read_full(int sock, char *out, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t k = read(sock, out + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *name = base_name(argv[0]);
    const char *off = getenv("MUSTER_CMD_SERVER");
    char sock_path[sizeof ((struct sockaddr_un *)0)->sun_path];
    /* In a job, a command runs by itself: a job's processes end with it, and a server
     * started there would outlive it. */
    int in_job = getenv("SLURM_JOB_ID") || getenv("SLURM_JOBID");
    int wait = off && strcmp(off, "wait") == 0;
    if ((off && strcmp(off, "0") == 0) || in_job || site_off() || socket_path(sock_path, sizeof sock_path) != 0)
        direct(name, argc, argv);
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            direct(name, argc, argv);

    unsigned ignored = 0;
    for (int sig = 1; sig < 32; sig++) {
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            ignored |= 1u << sig;
    }
    struct sigaction sa = {.sa_handler = forward, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++)
        if (!(ignored & (1u << forwarded[i])))
            sigaction(forwarded[i], &sa, NULL);

    struct buf b = {0};
    if (request(&b, name, argc, argv, ignored) != 0)
        direct(name, argc, argv);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, sock_path, sizeof sock_path);
    struct stat bound;
    if (sock < 0 || stat(sock_path, &bound) != 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (sock < 0 || (errno != ENOENT && errno != ECONNREFUSED))
            direct(name, argc, argv);
        start_server(sock_path);
        for (int tries = wait ? STARTING * 100 : 0;; tries--) {
            if (tries <= 0)
                direct(name, argc, argv);
            usleep(10000);
            if (stat(sock_path, &bound) == 0 && connect(sock, (struct sockaddr *)&addr, sizeof addr) == 0)
                break;
        }
    }
    struct ucred peer;
    socklen_t peer_len = sizeof peer;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 || peer.uid != geteuid())
        direct(name, argc, argv);
    if (send_request(sock, &b) != 0)
        direct(name, argc, argv);
    free(b.data);

    struct pollfd answer = {.fd = sock, .events = POLLIN};
    int polled;
    while ((polled = poll(&answer, 1, ANSWER)) < 0 && errno == EINTR)
        ;
    if (polled == 0) { /* no runner took it (one forked later will find us gone) */
        struct stat now; /* a server stopped, or too slow to fork: the next command starts another */
        if (stat(sock_path, &now) == 0 && now.st_ino == bound.st_ino && now.st_dev == bound.st_dev)
            unlink(sock_path);
        close(sock);
        direct(name, argc, argv);
    }
    char reply[5];
    for (;;) {
        if (read_full(sock, reply, 1) != 0) {
            if (runner == 0) /* nothing ran: the server went away before taking the command */
                direct(name, argc, argv);
            fprintf(stderr, "%s: error: muster's command server ended before the command did\n", name);
            return 1;
        }
        if (reply[0] == 'F') { /* sent only before the runner starts the command: nothing ran */
            close(sock);
            direct(name, argc, argv);
        }
        if (read_full(sock, reply + 1, 4) != 0)
            continue; /* reported as above at the next read */
        int32_t value;
        memcpy(&value, reply + 1, 4);
        if (reply[0] == 'P') {
            runner = value;
            if (pending == SIGTSTP)
                stop_both();
            else if (pending)
                kill(runner, pending);
            if (send_go(sock) != 0) { /* the runner has gone without its "G": nothing ran */
                close(sock);
                direct(name, argc, argv);
            }
        } else if (reply[0] == 'X') {
            if (WIFSIGNALED(value)) {
                int sig = WTERMSIG(value);
                signal(sig, SIG_DFL);
                sigset_t set;
                sigemptyset(&set);
                sigaddset(&set, sig);
                sigprocmask(SIG_UNBLOCK, &set, NULL);
                raise(sig);
                return 128 + sig;
            }
            return WIFEXITED(value) ? WEXITSTATUS(value) : 1;
        }
    }
}
