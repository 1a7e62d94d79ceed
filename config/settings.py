"""Django settings, read from the environment with django-environ (docs/configuration.md).

Every setting has an embedded default (docs/architecture.md#processes-embedded-and-production), so
a fresh machine with
nothing configured runs on a SQLite file, the in-memory channel layer, the
inline job executor and the local GGUF model. A ``.env`` file in the project
root is read if present.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from agentlab.agent.mcp.config import MCPConfigError, parse_servers
from config.deploy import (
    admins_setting,
    allow_list,
    https_origins,
    is_deployment,
    proxy_ssl_header,
    public_hosts,
)
from config.environment import env_number

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEVELOPMENT_SECRET_KEY = "agentlab-insecure-development-key-change-me"
SECRET_KEY = env.str("SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

# --- HTTPS deployment -------------------------------------------------------------
#: A deployment: ALLOWED_HOSTS names a host that is not this machine's loopback.
#: Then the HTTPS settings below are on unless the environment turns them off,
#: and the development SECRET_KEY is refused; on a developer's machine (nothing
#: set) they are off, so `runserver` over plain HTTP and `make demo` work.
DEPLOYMENT = is_deployment(ALLOWED_HOSTS)
if not SECRET_KEY.strip():
    # Django would start and then answer every request with a 500
    raise ImproperlyConfigured(
        "SECRET_KEY is set but empty: set it to a long random value (e.g. python -c "
        "'import secrets; print(secrets.token_urlsafe(50))'), or unset it on a developer's machine"
    )
if DEPLOYMENT and SECRET_KEY == DEVELOPMENT_SECRET_KEY:
    raise ImproperlyConfigured(
        f"ALLOWED_HOSTS names {', '.join(public_hosts(ALLOWED_HOSTS))}, a deployment, but SECRET_KEY is "
        "the development key: set SECRET_KEY to a long random value (e.g. python -c "
        "'import secrets; print(secrets.token_urlsafe(50))')"
    )
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=DEPLOYMENT)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]  # private-network probes, scrapers
SECURE_HSTS_SECONDS = env_number("SECURE_HSTS_SECONDS", 31_536_000 if DEPLOYMENT else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=DEPLOYMENT)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=DEPLOYMENT)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=DEPLOYMENT)
#: "HEADER,value" trusted to say a request came over HTTPS, set by the TLS
#: proxy in front of daphne (which must overwrite the header, never pass a
#: client's on); empty turns it off.
try:
    SECURE_PROXY_SSL_HEADER = proxy_ssl_header(
        env.str("SECURE_PROXY_SSL_HEADER", default="HTTP_X_FORWARDED_PROTO,https" if DEPLOYMENT else "")
    )
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=https_origins(ALLOWED_HOSTS))

INSTALLED_APPS = [
    # daphne's runserver, without importing its server at app loading (config/apps.py)
    "config.apps.DaphneConfig",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    # django-ninja's own templates and static files: /api/docs serves Swagger UI
    # from the project (no CDN), so it works without internet
    "ninja",
    # database-backed beat schedules: the sweeper and the evaluation schedules
    "django_celery_beat",
    "turns",
    "evaluation",
    # online evaluation of chat turns: above evaluation (it uses its scorers and judge)
    "monitoring",
    "apikeys",
    # The project itself: its ready() creates the Celery app (config/apps.py).
    "config.apps.AgentLabConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # daphne serves no static files: WhiteNoise does, in every mode, so the
    # chat pages work under a plain `runserver` with DEBUG off too.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # before anything reads a body: the API's 415 and 413 (config.middleware)
    "config.middleware.ApiBodyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database -----------------------------------------------------------------
# Unset DATABASE_URL means a SQLite file tuned for concurrent writers: WAL lets
# readers run beside the one writer, IMMEDIATE transactions take the write lock
# at BEGIN (so two writers queue on the busy timeout instead of one failing with
# "database is locked" when it upgrades a read lock), and the timeout is long
# enough for a burst of event appends from many turns.
SQLITE_PATH = env.path("AGENTLAB_SQLITE_PATH", default=BASE_DIR / "var" / "agentlab.sqlite3")
if env.str("DATABASE_URL", default=""):
    DATABASES = {"default": env.db("DATABASE_URL")}
    if not DATABASES["default"].get("ENGINE"):  # django-environ read no scheme it knows
        raise ImproperlyConfigured(
            "DATABASE_URL is not a database URL (no scheme such as postgres://): give "
            "postgres://USER@HOST:PORT/NAME, or leave it unset for the embedded SQLite file"
        )
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"].setdefault("CONN_MAX_AGE", 60)
        DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
else:
    Path(SQLITE_PATH).parent.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(SQLITE_PATH),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;"
                ),
            },
            "TEST": {"NAME": str(Path(SQLITE_PATH).with_name("test_agentlab.sqlite3"))},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=BASE_DIR / "var" / "static")
# Serve straight from the apps' static folders, so no collectstatic step is
# needed; a deployment that runs collectstatic may turn this off.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=True)
Path(STATIC_ROOT).mkdir(parents=True, exist_ok=True)  # WhiteNoise warns about a missing one
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# --- channel layer ------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
#: Options for each channels_redis host. redis-py ≥ 8 reads with a 5 s socket
#: timeout by default — the same 5 s channels_redis blocks in BZPOPMIN — so a
#: busy process lost that race ("Timeout reading from …") and the consumer died
#: with 1011. Its pool also raises "Too many connections" past its limit
#: instead of waiting (100 sockets leaving at once reached the default 100).
REDIS_CHANNEL_HOST_OPTIONS = {
    "socket_timeout": env_number("REDIS_SOCKET_TIMEOUT_S", 30.0, positive=True),
    "max_connections": env_number("REDIS_MAX_CONNECTIONS", 2000, minimum=1),
}
if REDIS_URL:
    # with a retry of a command that meets a connection a Redis restart killed
    from config.layer import redis_host

    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [redis_host(REDIS_URL, REDIS_CHANNEL_HOST_OPTIONS)],
                "capacity": env_number("CHANNEL_CAPACITY", 100, minimum=1),
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": env_number("CHANNEL_CAPACITY", 100, minimum=1)},
        }
    }

# --- jobs ---------------------------------------------------------------------
# No broker configured means turns run inside the server process (the inline
# executor, docs/architecture.md#processes-embedded-and-production); Celery is used only when
# CELERY_BROKER_URL is set.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = TIME_ZONE
# A broker restart must not end the worker: retry the connection forever, at
# start and after a loss (Celery's default gives up after 100 tries), and
# notice a dead connection within a minute (Redis health checks, heartbeats
# on AMQP). systemd restarts whatever still exits (deploy/systemd/).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_BROKER_HEARTBEAT = 30
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"health_check_interval": 30, "socket_keepalive": True}
    # kombu's Redis transport with a guard: a Redis restart while the worker
    # holds unacked turns ended the worker (config/broker.py says how)
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"
# a turn in flight goes on after a broker loss: its redelivered message is a
# duplicate the driver's conditional claim turns into a no-op
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
#: The queue ``run_eval --celery`` sends a run's examples to (``--queue``
#: overrides it); empty: Celery's default queue (CELERY_TASK_DEFAULT_QUEUE).
AGENTLAB_EVAL_QUEUE = env.str("AGENTLAB_EVAL_QUEUE", default="")
#: Examples per Celery message of ``run_eval --celery``: a worker slot drives a
#: message's examples at once, so a worker runs up to --concurrency × this many turns.
AGENTLAB_EVAL_BATCH = env_number("AGENTLAB_EVAL_BATCH", 4, positive=True)
#: Celery beat reads its schedule from the database (django-celery-beat): the
#: stale-turn sweeper and the evaluation schedules managed in the admin.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
#: The queue beat sends scheduled evaluations to (empty: Celery's default
#: queue). A scheduled run with "celery" follows its turns from that worker
#: slot, so its turns must go to another queue (evaluation.schedules.options).
AGENTLAB_SCHEDULE_QUEUE = env.str("AGENTLAB_SCHEDULE_QUEUE", default="").strip()
#: Most database threads (each with its own PostgreSQL connection) one
#: in-process run_eval uses: min(--concurrency, this). See
#: docs/production.md#postgresql-connections for max_connections.
AGENTLAB_DB_THREADS_MAX = env_number("AGENTLAB_DB_THREADS_MAX", 32, minimum=1)
#: The event log's group-commit writer (turns.driver.writer; docs/architecture.md#the-group-commit-writer):
#: the most appends written in one transaction (0: no writer, a transaction
#: per append), and how long (milliseconds) it waits for more after the first.
AGENTLAB_WRITER_BATCH = env_number("AGENTLAB_WRITER_BATCH", 128, minimum=0)
AGENTLAB_WRITER_WAIT_MS = env_number("AGENTLAB_WRITER_WAIT_MS", 2.0, minimum=0.0)
#: Seconds between run_eval's plain progress lines when stderr is not a terminal.
AGENTLAB_PROGRESS_EVERY_S = env_number("AGENTLAB_PROGRESS_EVERY_S", 10.0, positive=True)
#: The address people open AgentLab at (``https://agentlab.example.org``): the
#: CI summaries (``--summary-md``) link to the run report under it; empty: no links.
AGENTLAB_BASE_URL = env.str("AGENTLAB_BASE_URL", default="").strip().rstrip("/")
if AGENTLAB_BASE_URL and not AGENTLAB_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"AGENTLAB_BASE_URL must be an http:// or https:// address, got {AGENTLAB_BASE_URL!r}"
    )

# --- agent --------------------------------------------------------------------
AGENTLAB_LLM_BASE_URL = env.str("AGENTLAB_LLM_BASE_URL", default="") or None
AGENTLAB_LLM_API_KEY = env.str("AGENTLAB_LLM_API_KEY", default="") or None
AGENTLAB_MODEL = env.str("AGENTLAB_MODEL", default="") or None
AGENTLAB_GGUF_PATH = env.str("AGENTLAB_GGUF_PATH", default="") or None
#: How the reviewer and the judge ask an endpoint for their verdict under a
#: JSON schema: ``json_schema`` (OpenAI, vLLM, Ollama, LM Studio),
#: ``json_object`` (llama-cpp-python's server) or ``off``; a server that
#: refuses one form is asked in the next (docs/configuration.md#endpoints).
AGENTLAB_LLM_STRUCTURED_OUTPUT = (
    env.str("AGENTLAB_LLM_STRUCTURED_OUTPUT", default="json_schema").strip().lower()
)
if AGENTLAB_LLM_STRUCTURED_OUTPUT not in ("json_schema", "json_object", "off"):
    raise ImproperlyConfigured(
        "AGENTLAB_LLM_STRUCTURED_OUTPUT must be json_schema, json_object or off, "
        f"got {os.environ.get('AGENTLAB_LLM_STRUCTURED_OUTPUT')!r}"
    )
#: Seconds one request to the endpoint may take (a CPU-only llama.cpp server
#: writes a few tokens a second: 512 of them take minutes).
AGENTLAB_LLM_TIMEOUT_S = env_number("AGENTLAB_LLM_TIMEOUT_S", 60.0, positive=True)
#: Whether agent steps, which offer tools, are streamed from an endpoint
#: (llama-cpp-python's server cannot stream an automatic tool choice).
AGENTLAB_LLM_STREAM_TOOLS = env.bool("AGENTLAB_LLM_STREAM_TOOLS", default=True)
#: The LLM-call cache for chat turns (docs/evaluating.md#caching-llm-calls):
#: unset or ``off`` — chat turns never use it; ``on`` — they do, entries never
#: expire; an age such as ``7d`` — they do, entries served for that long.
AGENTLAB_CHAT_LLM_CACHE = env.str("AGENTLAB_CHAT_LLM_CACHE", default="").strip().lower()
if AGENTLAB_CHAT_LLM_CACHE not in ("", "off", "on"):
    from agentlab.agent.providers.caching import parse_expiry

    try:
        parse_expiry(AGENTLAB_CHAT_LLM_CACHE, option="AGENTLAB_CHAT_LLM_CACHE")
    except ValueError as exc:
        raise ImproperlyConfigured(f"{exc} (or on / off)") from None
#: The GGUF file whose tokenizer counts a streamed reply's tokens when the
#: endpoint sends no usage; ``off``: never count; unset: the model's own file
#: when the endpoint names it (agentlab.agent.providers.token_count).
AGENTLAB_LLM_TOKENIZER = env.str("AGENTLAB_LLM_TOKENIZER", default="").strip() or None
#: The embedded model's context window in tokens (prompt + reply). SmolLM2 is
#: trained for 8,192; 2,048 overflowed on GSM8K (docs/benchmarks.md#the-embedded-model).
AGENTLAB_LOCAL_N_CTX = env_number("AGENTLAB_LOCAL_N_CTX", 8192, minimum=256)
#: An endpoint's context window in tokens (prompt + reply), which a
#: conversation's history is fitted to (agentlab.agent.history); the embedded
#: model's is AGENTLAB_LOCAL_N_CTX.
AGENTLAB_LLM_CONTEXT_WINDOW = env_number("AGENTLAB_LLM_CONTEXT_WINDOW", 8192, minimum=256)
#: What a turn of a conversation is given of the turns before it: ``answers``
#: (their questions and answers) or ``full`` (also their tool calls and
#: results); a conversation's own ``history`` overrides it (docs/configuration.md).
AGENTLAB_CHAT_HISTORY = env.str("AGENTLAB_CHAT_HISTORY", default="answers").strip().lower()
if AGENTLAB_CHAT_HISTORY not in ("answers", "full"):
    raise ImproperlyConfigured(
        f"AGENTLAB_CHAT_HISTORY must be answers or full, got {os.environ.get('AGENTLAB_CHAT_HISTORY')!r}"
    )
AGENTLAB_MAX_STEPS = env_number("AGENTLAB_MAX_STEPS", 6, minimum=1)
AGENTLAB_TURN_TIMEOUT_S = env_number("AGENTLAB_TURN_TIMEOUT_S", 600.0, minimum=0.0)
#: The output-token limit of one LLM call (agent steps and reviews); a final
#: answer cut by it ends the turn failed with stop reason ``length`` (retryable
#: with more). run_eval has --max-output-tokens.
AGENTLAB_MAX_OUTPUT_TOKENS = env_number("AGENTLAB_MAX_OUTPUT_TOKENS", 512, minimum=1)

HEARTBEAT_S = env_number("HEARTBEAT_S", 15.0, positive=True)
TURN_STALE_S = env_number("TURN_STALE_S", 120.0, positive=True)
REVIEW_WAIT_S = env_number("REVIEW_WAIT_S", 25.0, minimum=0.0)
#: Review answered attempts with a second LLM call (docs/architecture.md#the-turn-lifecycle);
# run_eval has --review/--no-review.
#: Unset (``None``): each provider's own default (``review_by_default``) — on
#: for an endpoint model, off for the embedded local model, whose reviewer was
#: measured not to help (docs/benchmarks.md#the-embedded-model).
AGENTLAB_REVIEW: bool | None = (
    env.bool("AGENTLAB_REVIEW") if env.str("AGENTLAB_REVIEW", default="").strip() else None
)
APPROVAL_TIMEOUT_S = env_number("APPROVAL_TIMEOUT_S", 0.0, minimum=0.0) or None

# --- your own agent (docs/extending.md) ---------------------------------------------
#: Plugins active in every turn: dotted paths (or entry-point names), in the
#: order whose last system prompt wins. Imported at the first turn, checked by
#: ``manage.py check`` (and so at server start) and by run_eval.
AGENTLAB_PLUGINS = [name.strip() for name in env.list("AGENTLAB_PLUGINS", default=[]) if name.strip()]
#: MCP tool servers offered to every turn: a JSON object, name -> URL, command or
#: object (agentlab.agent.mcp.config).
try:
    AGENTLAB_MCP_SERVERS = parse_servers(env.str("AGENTLAB_MCP_SERVERS", default=""))
except MCPConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None

# --- API keys ---------------------------------------------------------------------
#: Requests per API key (django-ninja's rate format: "120/min", "10/s", "5000/d");
#: empty: no limit. Counted in the cache (Redis when REDIS_URL is set).
AGENTLAB_API_KEY_RATE = env.str("AGENTLAB_API_KEY_RATE", default="120/min").strip()
if AGENTLAB_API_KEY_RATE and not re.fullmatch(
    r"\d+/(\d+|\d*(s|sec|m|min|h|hour|d|day))", AGENTLAB_API_KEY_RATE
):
    raise ImproperlyConfigured(
        "AGENTLAB_API_KEY_RATE must be N/period such as 120/min, 10/s or 5000/d, "
        f"got {AGENTLAB_API_KEY_RATE!r}"
    )
if REDIS_URL:
    # shared by every process, so a key's rate is one count, not one per daphne
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

# --- telemetry (docs/production.md#metrics) ---------------------------------------------
#: /metrics in a deployment: a bearer token a scraper sends (Authorization: Bearer …)
#: and/or the addresses or networks it may come from; neither set: /metrics is refused.
#: Outside a deployment /metrics is open unless a token is set. The OTEL_* variables and
#: AGENTLAB_METRICS / AGENTLAB_OTEL_CAPTURE_CONTENT are read by agentlab.telemetry itself.
AGENTLAB_METRICS_TOKEN = env.str("AGENTLAB_METRICS_TOKEN", default="").strip()
try:
    AGENTLAB_METRICS_ALLOW = allow_list(
        env.list("AGENTLAB_METRICS_ALLOW", default=[]), name="AGENTLAB_METRICS_ALLOW"
    )
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None

# --- e-mail -------------------------------------------------------------------------
#: Who is told of a significant regression in a scheduled evaluation (and of
#: server errors): comma-separated "Name <address>" or bare addresses; empty:
#: nobody is mailed (the WARNING log line is still written).
try:
    ADMINS = admins_setting(env.list("ADMINS", default=[]))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
#: How mail is sent, as one URL (django-environ): smtp://user:password@host:587
#: (submission with STARTTLS: smtp+tls://), consolemail:// (print it). Unset:
#: Django's default, SMTP on localhost:25.
_email = env.email_url("EMAIL_URL", default="smtp://localhost:25")
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
EMAIL_HOST = _email.get("EMAIL_HOST") or "localhost"
EMAIL_PORT = int(_email.get("EMAIL_PORT") or 25)
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = bool(_email.get("EMAIL_USE_TLS"))
EMAIL_USE_SSL = bool(_email.get("EMAIL_USE_SSL"))
SERVER_EMAIL = env.str("SERVER_EMAIL", default="agentlab@localhost")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default=SERVER_EMAIL)
EMAIL_SUBJECT_PREFIX = env.str("EMAIL_SUBJECT_PREFIX", default="[AgentLab] ")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
}
