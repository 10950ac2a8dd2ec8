// cardsim fabricd: a fabric server started by hand, for jobs whose ranks span hosts (or to
// share one fabric between jobs). Ranks find it through CARDSIM_FABRIC=host:port, or those
// on its host through its Unix-domain socket (CARDSIM_FABRIC=unix:@NAME, printed at start).
// Serves until SIGINT or SIGTERM.
#include <csignal>
#include <cstdio>

#include <pthread.h>

#include "simulator/FabricConfig.h"
#include <boost/asio/ip/address.hpp>

#include "simulator/FabricServer.h"
#include "traces/cli/Args.h"
#include "traces/cli/Commands.h"

namespace cardsim::cli {

namespace {
const std::vector<FlagSpec> kFlags = {
    {"port", true, false, "TCP port (default 0: any free port, printed at start)"},
    {"bind", true, false, "address to listen on (default 0.0.0.0; 127.0.0.1 for this host only)"},
    {"preset", true, false, "device preset whose fabric is modelled (default mlu370-x8); ranks must use the same"},
    {"set", true, true, "key.path=value override of the preset"},
    {"settle-s", true, false, "wall seconds a ready collective waits for every rank of its job to be waiting "
                               "(so that overlapping collectives are timed together; default 3)"},
    {"quiet", false, false, "no line per connection on stderr"},
    {"help", false, false, "this help"},
};
}  // namespace

int runFabricd(const std::vector<std::string>& argv) {
  Args a("fabricd", kFlags, argv);
  if (a.has("help")) {
    std::fputs(Args::usage("fabricd", kFlags).c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw UsageError("cardsim fabricd: unexpected argument '" + a.positional()[0] + "'");
  const long long port = a.integer("port", 0);
  if (port < 0 || port > 65535) throw UsageError("cardsim fabricd: --port must be 0..65535, got " + std::to_string(port));
  sim::SimOptions o;
  o.preset = a.get("preset", "mlu370-x8");
  o.overrides = a.all("set");
  sim::FabricServer::Options so;
  so.preset = o.preset;
  so.bind = a.get("bind", "0.0.0.0");
  {
    boost::system::error_code ec;
    (void)boost::asio::ip::make_address(so.bind, ec);
    if (ec) throw UsageError("cardsim fabricd: --bind " + so.bind + " is not an IP address (" + ec.message() + ")");
  }
  so.port = static_cast<uint16_t>(port);
  so.log = !a.has("quiet");
  so.local = true;
  so.settle_s = a.number("settle-s", 3.0);
  if (!(so.settle_s >= 0) || so.settle_s > 3600)
    throw UsageError("cardsim fabricd: --settle-s must be 0..3600 seconds, got " + a.get("settle-s", ""));
  // Signals are taken by sigwait below, not by whichever thread they land on.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  sim::FabricServer server(sim::loadFabricParams(o), so);
  server.start();
  const std::string local = server.localAddress().empty() ? std::string()
                                                          : "; on this host also CARDSIM_FABRIC=" + server.localAddress();
  std::printf("cardsim fabricd: serving the fabric of preset %s on %s:%u (ranks: CARDSIM_FABRIC=<this host>:%u%s)\n",
              o.preset.c_str(), so.bind.c_str(), server.port(), server.port(), local.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server.stop(2.0);
  const auto s = server.stats();
  // Revised: answers whose end a later collective sharing their links moved later.
  std::fprintf(stderr, "cardsim fabricd: stopped (%llu collectives completed, %llu failed, %llu revised)\n",
               static_cast<unsigned long long>(s.collectives_completed),
               static_cast<unsigned long long>(s.collectives_failed),
               static_cast<unsigned long long>(s.collectives_revised));
  return 0;
}

}  // namespace cardsim::cli
