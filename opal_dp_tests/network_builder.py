"""Deterministic builder of the reference stop network ``data/reference/stops.csv``.

An approximation of the 2016 Opal network: real train stations (Sydney Trains and NSW
TrainLink intercity), ferry wharves and the 23 Inner West light-rail stops, plus bus
stops scattered around real NSW postcodes. Train lines are listed as paths of
``name, postcode[, lat, lon]``; stations without coordinates are interpolated between
their neighbours along the path. Stop ids follow TfNSW's scheme of postcode + suffix:
``postcode * 100 + k`` for train/ferry/light rail, ``postcode * 1000 + 100 + k`` for bus.

Run once with ``python -m opal_dp_tests.network_builder`` and commit the CSV it writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from opal_dp import settings
from opal_dp.network import STOPS_FILE

TRAIN_PATHS = (
    """Central, 2000, -33.8832, 151.2062
    Town Hall, 2000, -33.8732, 151.2067
    Wynyard, 2000, -33.8660, 151.2057
    Milsons Point, 2061, -33.8460, 151.2118
    North Sydney, 2060, -33.8404, 151.2073
    Waverton, 2060, -33.8381, 151.1975
    Wollstonecraft, 2065
    St Leonards, 2065, -33.8232, 151.1946
    Artarmon, 2064
    Chatswood, 2067, -33.7969, 151.1806
    Roseville, 2069
    Lindfield, 2070
    Killara, 2071
    Gordon, 2072, -33.7560, 151.1543
    Pymble, 2073
    Turramurra, 2074
    Warrawee, 2074
    Wahroonga, 2076
    Waitara, 2077
    Hornsby, 2077, -33.7024, 151.0994
    Asquith, 2077
    Mount Colah, 2079
    Mount Kuring-gai, 2080
    Berowra, 2081, -33.6236, 151.1510
    Cowan, 2081
    Hawkesbury River, 2083, -33.5460, 151.2234
    Wondabyne, 2256
    Woy Woy, 2256, -33.4852, 151.3240
    Koolewong, 2256
    Tascott, 2250
    Point Clare, 2250
    Gosford, 2250, -33.4247, 151.3419
    Narara, 2250
    Niagara Park, 2250
    Lisarow, 2250
    Ourimbah, 2258
    Tuggerah, 2259, -33.3069, 151.4152
    Wyong, 2259
    Warnervale, 2259
    Wyee, 2259
    Morisset, 2264, -33.1083, 151.4871
    Dora Creek, 2264
    Awaba, 2283
    Fassifern, 2283, -32.9853, 151.5812
    Booragul, 2284
    Teralba, 2284
    Cockle Creek, 2284
    Cardiff, 2285, -32.9390, 151.6589
    Kotara, 2289
    Adamstown, 2289
    Broadmeadow, 2292, -32.9231, 151.7349
    Hamilton, 2303, -32.9189, 151.7490
    Wickham, 2293
    Civic, 2300
    Newcastle, 2300, -32.9257, 151.7809""",
    """Hamilton, 2303
    Waratah, 2298
    Warabrook, 2304
    Sandgate, 2304, -32.8680, 151.7058
    Hexham, 2322
    Tarro, 2322
    Beresfield, 2322, -32.7979, 151.6570
    Thornton, 2322
    Metford, 2323
    Victoria Street, 2323
    East Maitland, 2323
    High Street, 2320
    Maitland, 2320, -32.7360, 151.5553
    Telarah, 2320, -32.7283, 151.5363""",
    """Strathfield, 2135, -33.8717, 151.0943
    North Strathfield, 2137
    Concord West, 2138
    Rhodes, 2138, -33.8305, 151.0874
    Meadowbank, 2114
    West Ryde, 2114, -33.8068, 151.0901
    Denistone, 2114
    Eastwood, 2122, -33.7909, 151.0817
    Epping, 2121, -33.7727, 151.0820
    Cheltenham, 2119
    Beecroft, 2119, -33.7495, 151.0648
    Pennant Hills, 2120, -33.7380, 151.0719
    Thornleigh, 2120
    Normanhurst, 2076
    Hornsby, 2077""",
    """Epping, 2121
    Macquarie University, 2113, -33.7759, 151.1137
    Macquarie Park, 2113, -33.7821, 151.1286
    North Ryde, 2113, -33.7969, 151.1243
    Chatswood, 2067""",
    """Central, 2000
    Redfern, 2016, -33.8918, 151.1986
    Macdonaldtown, 2042
    Newtown, 2042, -33.8978, 151.1793
    Stanmore, 2048
    Petersham, 2049
    Lewisham, 2049
    Summer Hill, 2130
    Ashfield, 2131, -33.8881, 151.1257
    Croydon, 2132
    Burwood, 2134, -33.8773, 151.1040
    Strathfield, 2135
    Homebush, 2140
    Flemington, 2140
    Lidcombe, 2141, -33.8644, 151.0472
    Auburn, 2144, -33.8493, 151.0330
    Clyde, 2142, -33.8337, 151.0170
    Granville, 2142, -33.8325, 151.0122
    Harris Park, 2150
    Parramatta, 2150, -33.8170, 151.0034
    Westmead, 2145, -33.8079, 150.9877
    Wentworthville, 2145
    Pendle Hill, 2145
    Toongabbie, 2146
    Seven Hills, 2147, -33.7744, 150.9363
    Blacktown, 2148, -33.7687, 150.9057
    Doonside, 2767
    Rooty Hill, 2766
    Mount Druitt, 2770, -33.7694, 150.8212
    St Marys, 2760, -33.7627, 150.7745
    Werrington, 2747
    Kingswood, 2747
    Penrith, 2750, -33.7506, 150.6942
    Emu Plains, 2750, -33.7455, 150.6722
    Lapstone, 2773
    Glenbrook, 2773, -33.7677, 150.6216
    Blaxland, 2774
    Warrimoo, 2774
    Valley Heights, 2777
    Springwood, 2777, -33.6991, 150.5641
    Faulconbridge, 2776
    Linden, 2778
    Woodford, 2778
    Hazelbrook, 2779
    Lawson, 2783, -33.7180, 150.4294
    Bullaburra, 2784
    Wentworth Falls, 2782
    Leura, 2780
    Katoomba, 2780, -33.7121, 150.3115
    Medlow Bath, 2780
    Blackheath, 2785, -33.6334, 150.2844
    Mount Victoria, 2786, -33.5880, 150.2560
    Bell, 2786, -33.5106, 150.2789
    Zig Zag, 2790
    Lithgow, 2790, -33.4811, 150.1571""",
    """Blacktown, 2148
    Marayong, 2148
    Quakers Hill, 2763
    Schofields, 2762
    Riverstone, 2765, -33.6795, 150.8595
    Vineyard, 2765
    Mulgrave, 2756
    Windsor, 2756, -33.6129, 150.8183
    Clarendon, 2756
    East Richmond, 2753
    Richmond, 2753, -33.5996, 150.7526""",
    """Lidcombe, 2141
    Berala, 2141
    Regents Park, 2143, -33.8830, 151.0243
    Sefton, 2162
    Chester Hill, 2162
    Leightonfield, 2163
    Villawood, 2163
    Carramar, 2163
    Cabramatta, 2166, -33.8946, 150.9359
    Warwick Farm, 2170
    Liverpool, 2170, -33.9245, 150.9265
    Casula, 2170
    Glenfield, 2167, -33.9699, 150.8930
    Macquarie Fields, 2564
    Ingleburn, 2565, -34.0011, 150.8653
    Minto, 2566
    Leumeah, 2560
    Campbelltown, 2560, -34.0631, 150.8148
    Macarthur, 2560, -34.0715, 150.7966
    Menangle Park, 2563
    Menangle, 2568
    Douglas Park, 2569
    Picton, 2571, -34.1700, 150.6114
    Tahmoor, 2573
    Bargo, 2574
    Yerrinbool, 2575
    Mittagong, 2575, -34.4502, 150.4479
    Bowral, 2576, -34.4797, 150.4196
    Burradoo, 2576
    Moss Vale, 2577, -34.5482, 150.3731
    Exeter, 2579
    Bundanoon, 2578, -34.6564, 150.2965
    Penrose, 2579
    Wingello, 2579
    Tallong, 2579
    Marulan, 2579
    Goulburn, 2580, -34.7550, 149.7213""",
    """Granville, 2142
    Merrylands, 2160, -33.8363, 150.9924
    Guildford, 2161
    Yennora, 2161
    Fairfield, 2165, -33.8720, 150.9566
    Canley Vale, 2166
    Cabramatta, 2166""",
    """Redfern, 2016
    Erskineville, 2043
    St Peters, 2044
    Sydenham, 2044, -33.9149, 151.1674
    Marrickville, 2204
    Dulwich Hill, 2203
    Hurlstone Park, 2193
    Canterbury, 2193
    Campsie, 2194, -33.9101, 151.1034
    Belmore, 2192
    Lakemba, 2195
    Wiley Park, 2195
    Punchbowl, 2196
    Bankstown, 2200, -33.9177, 151.0344
    Yagoona, 2199
    Birrong, 2143
    Regents Park, 2143""",
    """Sydenham, 2044
    Tempe, 2044
    Wolli Creek, 2205, -33.9284, 151.1547
    Arncliffe, 2205
    Banksia, 2216
    Rockdale, 2216, -33.9522, 151.1375
    Kogarah, 2217
    Carlton, 2218
    Allawah, 2218
    Hurstville, 2220, -33.9675, 151.1020
    Penshurst, 2222
    Mortdale, 2223
    Oatley, 2223, -33.9807, 151.0766
    Como, 2226, -34.0044, 151.0676
    Jannali, 2226
    Sutherland, 2232, -34.0312, 151.0577
    Loftus, 2232
    Engadine, 2233
    Heathcote, 2233
    Waterfall, 2233, -34.1351, 150.9947
    Helensburgh, 2508, -34.1784, 150.9817
    Otford, 2508
    Stanwell Park, 2508, -34.2266, 150.9869
    Coalcliff, 2508
    Scarborough, 2515
    Wombarra, 2515
    Coledale, 2515
    Austinmer, 2515
    Thirroul, 2515, -34.3180, 150.9194
    Bulli, 2516
    Woonona, 2517
    Bellambi, 2518
    Corrimal, 2518
    Towradgi, 2518
    Fairy Meadow, 2519
    North Wollongong, 2500
    Wollongong, 2500, -34.4248, 150.8931
    Coniston, 2500, -34.4366, 150.8848
    Unanderra, 2526
    Kembla Grange, 2526
    Dapto, 2530, -34.4944, 150.7935
    Albion Park, 2527
    Oak Flats, 2529
    Dunmore, 2529
    Minnamurra, 2533
    Bombo, 2533
    Kiama, 2533, -34.6713, 150.8542
    Gerringong, 2534
    Berry, 2535
    Bomaderry, 2541, -34.8538, 150.6075""",
    """Coniston, 2500
    Cringila, 2502
    Lysaght, 2505
    Port Kembla North, 2505
    Port Kembla, 2505, -34.4736, 150.9019""",
    """Sutherland, 2232
    Kirrawee, 2232
    Gymea, 2227
    Miranda, 2228, -34.0350, 151.1016
    Caringbah, 2229
    Woolooware, 2230
    Cronulla, 2230, -34.0557, 151.1523""",
    """Town Hall, 2000
    Martin Place, 2000, -33.8678, 151.2113
    Kings Cross, 2011, -33.8747, 151.2222
    Edgecliff, 2027, -33.8795, 151.2366
    Bondi Junction, 2022, -33.8915, 151.2478""",
    """Central, 2000
    Museum, 2000, -33.8764, 151.2097
    St James, 2000, -33.8708, 151.2110
    Circular Quay, 2000, -33.8614, 151.2108
    Wynyard, 2000""",
    """Central, 2000
    Green Square, 2017, -33.9055, 151.2025
    Mascot, 2020, -33.9215, 151.1872
    Domestic Airport, 2020, -33.9336, 151.1813
    International Airport, 2020, -33.9377, 151.1662
    Wolli Creek, 2205""",
    """Wolli Creek, 2205
    Turrella, 2205
    Bardwell Park, 2207
    Bexley North, 2207
    Kingsgrove, 2208, -33.9410, 151.0996
    Beverly Hills, 2209
    Narwee, 2209
    Riverwood, 2210
    Padstow, 2211
    Revesby, 2212, -33.9519, 151.0144
    Panania, 2213
    East Hills, 2213
    Holsworthy, 2173, -33.9627, 150.9511
    Glenfield, 2167""",
    """Clyde, 2142
    Rosehill, 2142
    Camellia, 2142
    Rydalmere, 2116, -33.8107, 151.0267
    Dundas, 2117
    Telopea, 2117
    Carlingford, 2118, -33.7812, 151.0490""",
    """Lidcombe, 2141
    Olympic Park, 2127, -33.8474, 151.0687""",
)

FERRY_WHARVES = """Circular Quay, 2000, -33.8611, 151.2110
    Manly, 2095, -33.8000, 151.2843
    Taronga Zoo, 2088, -33.8456, 151.2392
    Watsons Bay, 2030, -33.8436, 151.2818
    Rose Bay, 2029, -33.8708, 151.2687
    Double Bay, 2028, -33.8748, 151.2434
    Darling Point, 2027, -33.8697, 151.2393
    Garden Island, 2011, -33.8634, 151.2263
    Neutral Bay, 2089, -33.8414, 151.2196
    Kurraba Point, 2089, -33.8430, 151.2226
    Cremorne Point, 2090, -33.8456, 151.2317
    Mosman Bay, 2088, -33.8356, 151.2319
    Old Cremorne, 2090, -33.8395, 151.2340
    South Mosman, 2088, -33.8425, 151.2370
    Milsons Point, 2061, -33.8493, 151.2118
    McMahons Point, 2060, -33.8469, 151.2033
    North Sydney, 2060, -33.8452, 151.2074
    Balmain East, 2041, -33.8559, 151.1941
    Balmain, 2041, -33.8563, 151.1903
    Birchgrove, 2041, -33.8527, 151.1826
    Greenwich Point, 2065, -33.8397, 151.1845
    Woolwich, 2110, -33.8397, 151.1700
    Cockatoo Island, 2000, -33.8474, 151.1720
    Darling Harbour, 2000, -33.8703, 151.2006
    Pyrmont Bay, 2009, -33.8680, 151.1976
    Drummoyne, 2047, -33.8528, 151.1573
    Birkenhead Point, 2047, -33.8536, 151.1495
    Hunters Hill, 2110, -33.8367, 151.1532
    Huntleys Point, 2111, -33.8415, 151.1417
    Chiswick, 2046, -33.8496, 151.1373
    Abbotsford, 2046, -33.8505, 151.1299
    Cabarita, 2137, -33.8435, 151.1170
    Kissing Point, 2112, -33.8299, 151.1051
    Meadowbank, 2114, -33.8216, 151.0899
    Sydney Olympic Park, 2127, -33.8248, 151.0796
    Rydalmere, 2116, -33.8178, 151.0299
    Parramatta, 2150, -33.8144, 151.0090
    Queens Wharf, 2300, -32.9271, 151.7820
    Stockton, 2295, -32.9180, 151.7851"""

LIGHT_RAIL_STOPS = """Central, 2000, -33.8845, 151.2040
    Capitol Square, 2000, -33.8797, 151.2044
    Paddy's Markets, 2000, -33.8783, 151.2031
    Exhibition Centre, 2000, -33.8767, 151.2004
    Convention, 2000, -33.8748, 151.1993
    Pyrmont Bay, 2009, -33.8703, 151.1965
    The Star, 2009, -33.8683, 151.1945
    John Street Square, 2009, -33.8707, 151.1925
    Fish Market, 2009, -33.8738, 151.1918
    Wentworth Park, 2037, -33.8772, 151.1927
    Glebe, 2037, -33.8787, 151.1854
    Jubilee Park, 2037, -33.8752, 151.1800
    Rozelle Bay, 2037, -33.8731, 151.1742
    Lilyfield, 2040, -33.8713, 151.1657
    Leichhardt North, 2040, -33.8732, 151.1581
    Hawthorne, 2040, -33.8782, 151.1561
    Marion, 2040, -33.8834, 151.1543
    Taverners Hill, 2040, -33.8877, 151.1512
    Lewisham West, 2049, -33.8938, 151.1481
    Waratah Mills, 2203, -33.8979, 151.1450
    Arlington, 2203, -33.9002, 151.1419
    Dulwich Grove, 2203, -33.9027, 151.1405
    Dulwich Hill, 2203, -33.9048, 151.1383"""

BUS_ONLY_SUBURBS = """Sydney, 2000, -33.8700, 151.2080
    Surry Hills, 2010, -33.8860, 151.2111
    Ultimo, 2007, -33.8790, 151.1970
    Chippendale, 2008, -33.8870, 151.1990
    Paddington, 2021, -33.8845, 151.2285
    Bellevue Hill, 2023, -33.8870, 151.2560
    Bronte, 2024, -33.9030, 151.2640
    Woollahra, 2025, -33.8880, 151.2430
    Bondi Beach, 2026, -33.8915, 151.2740
    Vaucluse, 2030, -33.8580, 151.2770
    Randwick, 2031, -33.9140, 151.2410
    Kingsford, 2032, -33.9240, 151.2270
    Kensington, 2033, -33.9080, 151.2230
    Coogee, 2034, -33.9200, 151.2555
    Maroubra, 2035, -33.9500, 151.2430
    Matraville, 2036, -33.9600, 151.2310
    Annandale, 2038, -33.8810, 151.1700
    Rozelle, 2039, -33.8620, 151.1710
    Haberfield, 2045, -33.8800, 151.1390
    Five Dock, 2046, -33.8670, 151.1290
    Cammeray, 2062, -33.8210, 151.2120
    Northbridge, 2063, -33.8150, 151.2180
    Lane Cove, 2066, -33.8150, 151.1660
    Willoughby, 2068, -33.8040, 151.1990
    St Ives, 2075, -33.7300, 151.1700
    Terrey Hills, 2084, -33.6830, 151.2270
    Belrose, 2085, -33.7390, 151.2100
    Frenchs Forest, 2086, -33.7489, 151.2324
    Forestville, 2087, -33.7600, 151.2110
    Mosman, 2088, -33.8290, 151.2440
    Seaforth, 2092, -33.7960, 151.2490
    Balgowlah, 2093, -33.7940, 151.2640
    Fairlight, 2094, -33.7950, 151.2740
    Freshwater, 2096, -33.7790, 151.2870
    Collaroy, 2097, -33.7320, 151.3013
    Dee Why, 2099, -33.7516, 151.2864
    Brookvale, 2100, -33.7667, 151.2674
    Narrabeen, 2101, -33.7126, 151.2976
    Warriewood, 2102, -33.6880, 151.2990
    Mona Vale, 2103, -33.6777, 151.3031
    Bayview, 2104, -33.6620, 151.2990
    Newport, 2106, -33.6569, 151.3137
    Avalon, 2107, -33.6355, 151.3290
    Palm Beach, 2108, -33.5977, 151.3230
    Gladesville, 2111, -33.8330, 151.1270
    Ryde, 2112, -33.8150, 151.1030
    Ermington, 2115, -33.8130, 151.0550
    West Pennant Hills, 2125, -33.7480, 151.0400
    Cherrybrook, 2126, -33.7220, 151.0460
    Concord, 2137, -33.8590, 151.1040
    Enfield, 2136, -33.8870, 151.0930
    Northmead, 2152, -33.7850, 150.9970
    North Rocks, 2151, -33.7720, 151.0170
    Baulkham Hills, 2153, -33.7590, 150.9920
    Castle Hill, 2154, -33.7310, 151.0040
    Kellyville, 2155, -33.7130, 150.9550
    Glenhaven, 2156, -33.7000, 151.0000
    Dural, 2158, -33.6830, 151.0280
    Greystanes, 2145, -33.8230, 150.9450
    Smithfield, 2164, -33.8540, 150.9400
    Bossley Park, 2176, -33.8620, 150.8840
    Bonnyrigg, 2177, -33.8930, 150.8900
    Green Valley, 2168, -33.9030, 150.8670
    Hoxton Park, 2171, -33.9310, 150.8540
    Moorebank, 2170, -33.9430, 150.9550
    Wattle Grove, 2173, -33.9610, 150.9380
    Austral, 2179, -33.9270, 150.8090
    Greenacre, 2190, -33.9000, 151.0560
    Belfield, 2191, -33.9030, 151.0850
    Roselands, 2196, -33.9330, 151.0730
    Bass Hill, 2197, -33.9000, 151.0020
    Georges Hall, 2198, -33.9130, 150.9840
    Condell Park, 2200, -33.9240, 151.0110
    Earlwood, 2206, -33.9250, 151.1260
    Bexley, 2207, -33.9500, 151.1260
    Peakhurst, 2210, -33.9620, 151.0560
    Milperra, 2214, -33.9380, 150.9880
    Brighton-Le-Sands, 2216, -33.9600, 151.1540
    Ramsgate, 2217, -33.9830, 151.1400
    Sans Souci, 2219, -33.9890, 151.1330
    Sylvania, 2224, -34.0120, 151.1000
    Kurnell, 2231, -34.0100, 151.2050
    Menai, 2234, -34.0120, 151.0130
    Eagle Vale, 2558, -34.0380, 150.8150
    Claymore, 2559, -34.0460, 150.8110
    Ambarvale, 2560, -34.0900, 150.7970
    Narellan, 2567, -34.0420, 150.7360
    Camden, 2570, -34.0540, 150.6960
    Glenmore Park, 2745, -33.7900, 150.6690
    Cranebrook, 2749, -33.7160, 150.7100
    Bligh Park, 2756, -33.6380, 150.7930
    St Clair, 2759, -33.7970, 150.7850
    Plumpton, 2761, -33.7510, 150.8400
    Rouse Hill, 2155, -33.6820, 150.9150
    Stanhope Gardens, 2768, -33.7200, 150.9300
    Bidwill, 2770, -33.7300, 150.8220
    Charlestown, 2290, -32.9660, 151.6930
    Wallsend, 2287, -32.9000, 151.6680
    Merewether, 2291, -32.9450, 151.7520
    Jesmond, 2299, -32.9030, 151.6900
    Erina, 2250, -33.4370, 151.3900
    The Entrance, 2261, -33.3400, 151.4980
    Terrigal, 2260, -33.4480, 151.4450
    Shellharbour, 2529, -34.5790, 150.8690
    Figtree, 2525, -34.4340, 150.8600"""


def _parse(table: str) -> list[tuple[str, int, float, float]]:
    """Parse ``name, postcode[, lat, lon]`` lines; missing coordinates become NaN."""
    rows = []
    for line in table.strip().splitlines():
        name, postcode, *coords = (part.strip() for part in line.split(","))
        lat, lon = map(float, coords) if coords else (np.nan, np.nan)
        rows.append((name, int(postcode), lat, lon))
    return rows


def train_stations() -> pd.DataFrame:
    """Unique stations from ``TRAIN_PATHS``, interpolating missing coordinates along each path."""
    known: dict[str, tuple[int, float, float]] = {}
    for path in TRAIN_PATHS:
        rows = _parse(path)
        coords = np.array([known.get(name, row)[1:] for name, *row in rows])
        anchors = np.flatnonzero(~np.isnan(coords[:, 0]))
        if anchors[0] != 0 or anchors[-1] != len(rows) - 1:
            raise ValueError(f"train path must start and end at located stations: {rows[0][0]}..{rows[-1][0]}")
        steps = np.arange(len(rows))
        lat, lon = (np.interp(steps, anchors, coords[anchors, j]) for j in (0, 1))
        for (name, postcode, _, _), la, lo in zip(rows, lat, lon):
            known.setdefault(name, (postcode, float(la), float(lo)))
    return pd.DataFrame([(n, *v) for n, v in known.items()], columns=["name", "postcode", "lat", "lon"])


def _located(table: str) -> pd.DataFrame:
    return pd.DataFrame(_parse(table), columns=["name", "postcode", "lat", "lon"])


def bus_stops(suburbs: pd.DataFrame, seed: int = 2016) -> pd.DataFrame:
    """Scatter bus stops around each postcode's first-listed place; more of them near the CBD."""
    rng = np.random.default_rng(seed)
    centres = suburbs.drop_duplicates("postcode").sort_values("postcode", ignore_index=True)
    cbd_km = np.hypot(centres["lat"] + 33.8732, (centres["lon"] - 151.2067) * 0.83) * 111.0  # from Town Hall
    mean = np.where(centres["postcode"] == 2000, 150, 4 + 14 * np.exp(-cbd_km / 25.0))
    counts = np.maximum(2, rng.poisson(mean * rng.lognormal(0.0, 0.35, len(centres))))
    owner = np.repeat(np.arange(len(centres)), counts)
    seq = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    spread = np.repeat(np.where(cbd_km < 3, 0.004, 0.010), counts)
    return pd.DataFrame(
        {
            "name": centres["name"].to_numpy()[owner] + " bus stop " + seq.astype(str),
            "postcode": centres["postcode"].to_numpy()[owner],
            "lat": centres["lat"].to_numpy()[owner] + rng.normal(0.0, spread),
            "lon": centres["lon"].to_numpy()[owner] + rng.normal(0.0, spread * 1.2),
            "seq": seq,
        }
    )


def build_stops() -> pd.DataFrame:
    """The full reference network, sorted by ``stop_id``."""
    fixed = pd.concat(
        [
            train_stations().assign(mode="train"),
            _located(FERRY_WHARVES).assign(mode="ferry"),
            _located(LIGHT_RAIL_STOPS).assign(mode="light_rail"),
        ],
        ignore_index=True,
    )
    fixed["stop_id"] = fixed["postcode"] * 100 + 10 + fixed.groupby("postcode").cumcount()
    suburbs = pd.concat([_located(BUS_ONLY_SUBURBS), fixed], ignore_index=True)
    bus = bus_stops(suburbs).assign(mode="bus")
    bus["stop_id"] = bus["postcode"] * 1000 + 100 + bus.pop("seq")
    stops = pd.concat([fixed, bus], ignore_index=True)
    stops[["lat", "lon"]] = stops[["lat", "lon"]].round(6)
    if not stops["stop_id"].is_unique:
        raise ValueError("stop id suffixes overflowed: too many stops in one postcode")
    return stops[["stop_id", "mode", "name", "postcode", "lat", "lon"]].sort_values("stop_id", ignore_index=True)


def write_stops(path: Path | None = None) -> Path:
    """Build the network and write it as CSV (default ``data/reference/stops.csv``)."""
    path = path or settings.reference_dir() / STOPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    build_stops().to_csv(path, index=False)
    return path


if __name__ == "__main__":
    print(f"wrote {write_stops()}")
